#include "server/shared_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"

namespace ps {
namespace server {
namespace {

SharedRegions::Options Lend(uint64_t max_bytes, absl::Time* now = nullptr) {
  SharedRegions::Options options;
  options.max_bytes = max_bytes;
  options.idle_timeout = absl::Minutes(1);
  if (now != nullptr) options.now = [now] { return *now; };
  return options;
}

rpc::SharedSlot Name(const rpc::OpenSharedRegionResponse& region, uint32_t slot,
                     uint64_t keys_bytes, uint64_t grads_bytes = 0) {
  rpc::SharedSlot shared;
  shared.set_region(region.region());
  shared.set_secret(region.secret());
  shared.set_slot(slot);
  shared.set_keys_bytes(keys_bytes);
  shared.set_grads_bytes(grads_bytes);
  return shared;
}

TEST_CASE("a lent region is mapped by another opener as the response says", "[shared]") {
  SharedRegions regions(Lend(64 << 20));
  const auto region = regions.Open(3, 10000);
  REQUIRE(region.ok());
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  CHECK(region->slots() == 3);
  CHECK(region->slot_bytes() % page == 0);
  CHECK(region->slot_bytes() >= 10000);
  CHECK(region->header_bytes() == SharedRegionHeaderBytes(3));
  CHECK_FALSE(region->calls());  // no serve_call
  CHECK(region->secret().size() == 16);
  CHECK(region->pid() == getpid());
  const uint64_t total = region->header_bytes() + region->slots() * region->slot_bytes();
  CHECK(regions.bytes() == total);

  // What a client on this host does: open the server's fd through /proc and map it.
  const std::string path = absl::StrFormat("/proc/%d/fd/%d", region->pid(), region->fd());
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* mapped = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  REQUIRE(mapped != MAP_FAILED);
  auto* base = static_cast<unsigned char*>(mapped);
  SharedRegionHeader header;
  std::memcpy(&header, base, sizeof(header));
  CHECK(std::memcmp(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic)) == 0);
  CHECK(header.region == region->region());
  CHECK(std::memcmp(header.secret, region->secret().data(), 16) == 0);
  CHECK(header.slots == 3);
  CHECK(header.slot_bytes == region->slot_bytes());

  // The client's bytes in slot 2 are the server's, and back.
  unsigned char* client_slot = base + region->header_bytes() + 2 * region->slot_bytes();
  std::memset(client_slot, 0xAB, 100);
  const auto slot = regions.Find(Name(*region, 2, 100));
  REQUIRE(slot.ok());
  CHECK(slot->size() == region->slot_bytes());
  CHECK(slot->data()[0] == 0xAB);
  CHECK(slot->data()[99] == 0xAB);
  slot->data()[0] = 0x11;
  CHECK(client_slot[0] == 0x11);

  // Closed, the region is gone for requests; a slot found before keeps its mapping.
  REQUIRE(regions.Close(region->region(), region->secret()).ok());
  CHECK(regions.regions() == 0);
  CHECK(regions.bytes() == 0);
  CHECK(regions.opened() == 1);
  slot->data()[1] = 0x22;
  CHECK(client_slot[1] == 0x22);
  CHECK(regions.Find(Name(*region, 2, 100)).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  munmap(mapped, total);
}

TEST_CASE("requests naming a slot are checked", "[shared]") {
  SharedRegions regions(Lend(64 << 20));
  const auto region = regions.Open(2, 8192);
  REQUIRE(region.ok());
  const uint64_t slot_bytes = region->slot_bytes();

  CHECK(regions.Find(Name(*region, 1, slot_bytes)).ok());
  CHECK(regions.Find(Name(*region, 1, 8, slot_bytes - 8)).ok());
  auto code = [&](const rpc::SharedSlot& shared) { return regions.Find(shared).status().code(); };
  CHECK(code(Name(*region, 2, 8)) == absl::StatusCode::kInvalidArgument);
  CHECK(code(Name(*region, 0, slot_bytes + 1)) == absl::StatusCode::kInvalidArgument);
  CHECK(code(Name(*region, 0, 8, slot_bytes)) == absl::StatusCode::kInvalidArgument);
  CHECK(code(Name(*region, 0, ~uint64_t{0}, 16)) == absl::StatusCode::kInvalidArgument);
  rpc::SharedSlot wrong = Name(*region, 0, 8);
  wrong.mutable_secret()->back() ^= 1;
  CHECK(code(wrong) == absl::StatusCode::kPermissionDenied);
  wrong.set_secret("short");
  CHECK(code(wrong) == absl::StatusCode::kPermissionDenied);
  rpc::SharedSlot unknown = Name(*region, 0, 8);
  unknown.set_region(region->region() + 100);
  CHECK(code(unknown) == absl::StatusCode::kFailedPrecondition);
  CHECK(regions.Close(region->region(), "wrong").code() == absl::StatusCode::kPermissionDenied);
  CHECK(regions.Close(region->region() + 100, region->secret()).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("regions are bounded in number, size and bytes", "[shared]") {
  SECTION("none lent") {
    SharedRegions regions(Lend(0));
    CHECK(regions.Open(1, 4096).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("sizes out of range") {
    SharedRegions regions(Lend(1 << 30));
    CHECK(regions.Open(0, 4096).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(regions.Open(kMaxSharedSlots + 1, 4096).status().code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(regions.Open(1, 0).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(regions.Open(1, kMaxSharedSlotBytes + 1).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("over the server's bytes") {
    const uint64_t one = SharedRegionHeaderBytes(4) + 4 * (uint64_t{1} << 20);
    SharedRegions regions(Lend(2 * one));
    REQUIRE(regions.Open(4, 1 << 20).ok());
    const auto second = regions.Open(4, 1 << 20);
    REQUIRE(second.ok());
    const auto third = regions.Open(4, 1 << 20);
    CHECK(third.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(third.status().message().find("--shared_memory_mb") != absl::string_view::npos);
    REQUIRE(regions.Close(second->region(), second->secret()).ok());
    CHECK(regions.Open(4, 1 << 20).ok());
  }
}

TEST_CASE("regions unused past the idle timeout are closed at the next open", "[shared]") {
  absl::Time now = absl::FromUnixSeconds(1000);
  SharedRegions regions(Lend(64 << 20, &now));
  const auto idle = regions.Open(1, 4096);
  const auto used = regions.Open(1, 4096);
  REQUIRE(idle.ok());
  REQUIRE(used.ok());
  now += absl::Seconds(50);
  REQUIRE(regions.Find(Name(*used, 0, 8)).ok());
  now += absl::Seconds(20);  // idle: 70 s unused; used: 20 s
  REQUIRE(regions.Open(1, 4096).ok());
  CHECK(regions.regions() == 2);
  CHECK(regions.Find(Name(*idle, 0, 8)).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(regions.Find(Name(*used, 0, 8)).ok());
}

}  // namespace
}  // namespace server
}  // namespace ps
