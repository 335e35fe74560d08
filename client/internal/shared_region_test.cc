#include "client/internal/shared_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <set>

#include "common/shared_region_layout.h"

namespace ps {
namespace client_internal {
namespace {

// A region as a server lends one: a memfd of this process with its header written.
struct Lent {
  explicit Lent(uint32_t slots, uint64_t slot_bytes = 4096) {
    fd = memfd_create("test-region", MFD_CLOEXEC);
    bytes = SharedRegionHeaderBytes(slots) + slots * slot_bytes;
    REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(base != MAP_FAILED);
    SharedRegionHeader header;
    std::memcpy(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic));
    header.region = 7;
    for (int i = 0; i < 16; ++i) header.secret[i] = static_cast<unsigned char>(100 + i);
    header.slots = slots;
    header.slot_bytes = slot_bytes;
    std::memcpy(base, &header, sizeof(header));
    response.set_region(7);
    response.set_secret(std::string(reinterpret_cast<const char*>(header.secret), 16));
    response.set_pid(getpid());
    response.set_fd(fd);
    response.set_slots(slots);
    response.set_slot_bytes(slot_bytes);
    response.set_header_bytes(SharedRegionHeaderBytes(slots));
  }
  ~Lent() {
    munmap(base, bytes);
    close(fd);
  }
  unsigned char* slot(uint32_t i) const {
    return static_cast<unsigned char*>(base) + response.header_bytes() + i * response.slot_bytes();
  }

  int fd = -1;
  uint64_t bytes = 0;
  void* base = nullptr;
  rpc::OpenSharedRegionResponse response;
};

TEST_CASE("a lent region maps onto the lender's memory", "[client][shared]") {
  Lent lent(3);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  CHECK((*region)->id() == 7);
  CHECK((*region)->secret() == lent.response.secret());
  CHECK((*region)->slots() == 3);
  CHECK((*region)->slot_bytes() == 4096);
  (*region)->slot(2)[10] = 0x5A;
  CHECK(lent.slot(2)[10] == 0x5A);
  lent.slot(0)[0] = 0x33;
  CHECK((*region)->slot(0)[0] == 0x33);
}

TEST_CASE("what is not the lent region is refused", "[client][shared]") {
  Lent lent(2);
  SECTION("another region's header") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_region(8);
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kFailedPrecondition);
    other = lent.response;
    other.mutable_secret()->front() ^= 1;
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("another size") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_slots(3);
    other.set_header_bytes(SharedRegionHeaderBytes(3));
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("a file that is not there (another host's pid and fd)") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_fd(100000);
    const auto mapped = SharedRegion::Map(other);
    CHECK(mapped.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(mapped.status().message().find("another host") != absl::string_view::npos);
  }
  SECTION("an answer that describes no region") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_slot_bytes(1000);
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kInvalidArgument);
    other = lent.response;
    other.set_secret("x");
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kInvalidArgument);
    other = lent.response;
    other.set_slots(0);
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("slots are lent one request at a time, and retired ones never again",
          "[client][shared]") {
  Lent lent(3);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  SharedRegion& r = **region;
  std::set<int> taken;
  for (int i = 0; i < 3; ++i) taken.insert(r.Acquire());
  CHECK(taken == std::set<int>{0, 1, 2});
  CHECK(r.Acquire() == -1);
  r.Release(1);
  CHECK(r.Acquire() == 1);
  r.Retire(1);
  r.Release(0);
  CHECK(r.Acquire() == 0);
  CHECK(r.Acquire() == -1);
  CHECK(r.retired() == 1);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps
