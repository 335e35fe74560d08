#include "server/shared_regions.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/futex.h"

namespace ps {
namespace server {
namespace {

constexpr size_t kSecretBytes = sizeof(SharedRegionHeader::secret);

// How long a region's thread spins for the next call before it sleeps. Measured with ps_bench at
// 1000 keys on 2 cores (tests/bench/README.md).
constexpr absl::Duration kServeSpin = absl::Microseconds(100);

uint64_t RoundUpToPage(uint64_t bytes) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Compares in time that depends on the lengths only.
bool SameSecret(absl::string_view a, const unsigned char* b) {
  if (a.size() != kSecretBytes) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned char>(a[i]) ^ b[i];
  return diff == 0;
}

// Writes INTERNAL into `page`: a response of `bytes` bytes does not fit it.
void AnswerTooLong(SharedCallPage* page, size_t bytes) {
  const std::string text = absl::StrFormat(
      "the server's response (%d bytes) does not fit a call page of %d", bytes, sizeof(page->data));
  std::memcpy(page->data, text.data(), text.size());
  page->answer_bytes = static_cast<uint32_t>(text.size());
  page->code = static_cast<int32_t>(absl::StatusCode::kInternal);
}

}  // namespace

struct SharedRegions::Region {
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (base != nullptr) munmap(base, bytes);
    if (fd >= 0) close(fd);
  }

  uint32_t* bell(size_t offset) const { return reinterpret_cast<uint32_t*>(base + offset); }
  SharedCallPage* page(uint32_t slot) const {
    return reinterpret_cast<SharedCallPage*>(base + kSharedPageBytes * (1 + uint64_t{slot}));
  }

  uint64_t id = 0;
  int fd = -1;
  unsigned char* base = nullptr;
  uint64_t bytes = 0;
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t header_bytes = 0;
  unsigned char secret[kSecretBytes] = {};
  std::string peer;
  absl::Time last_used;  // guarded by SharedRegions::mu_
  // The calls' thread (rule 10), stopped by StopRegion.
  std::thread thread;
  std::atomic<bool> stopping{false};
};

SharedRegions::Call& SharedRegions::Call::operator=(Call&& other) noexcept {
  if (this != &other) {
    if (region_ != nullptr) Answer(absl::InternalError("the server dropped the call"), "");
    region_ = std::move(other.region_);
    other.region_ = nullptr;
    slot_ = other.slot_;
    method_ = other.method_;
    request_ = std::move(other.request_);
    taken_ = other.taken_;
    on_answered_ = std::move(other.on_answered_);
  }
  return *this;
}

SharedRegions::Call::~Call() {
  if (region_ != nullptr) Answer(absl::InternalError("the server dropped the call"), "");
}

uint64_t SharedRegions::Call::region() const { return region_->id; }

const std::string& SharedRegions::Call::peer() const { return region_->peer; }

void SharedRegions::Call::Answer(const absl::Status& status, absl::string_view response) {
  if (region_ == nullptr) return;
  SharedCallPage* page = region_->page(slot_);
  absl::string_view bytes = status.ok() ? response : status.message();
  if (status.ok() && bytes.size() > sizeof(page->data)) {
    // Cannot happen with this server's responses; said plainly rather than cut.
    AnswerTooLong(page, bytes.size());
  } else {
    bytes = bytes.substr(0, sizeof(page->data));
    std::memcpy(page->data, bytes.data(), bytes.size());
    page->answer_bytes = static_cast<uint32_t>(bytes.size());
    page->code = static_cast<int32_t>(status.code());
  }
  StoreWord(&page->state, kSharedCallAnswered);
  RingBell(region_->bell(kClientBellOffset));
  region_ = nullptr;
  if (on_answered_ != nullptr && *on_answered_) {
    (*on_answered_)(method_, status.code(), absl::Now() - taken_);
  }
}

SharedRegions::SharedRegions(Options options)
    : options_(std::move(options)),
      on_answered_(std::make_shared<const Call::Hook>(options_.on_answered)) {
  if (!options_.serve_call || options_.max_bytes == 0) return;  // no calls without regions
  for (int i = 0; i < std::max(1, options_.pool_threads); ++i) {
    pool_.emplace_back([this] { ServePool(); });
  }
}

void SharedRegions::ServePool() {
  pthread_setname_np(pthread_self(), "ps-shm-pool");
  while (true) {
    Call call;
    {
      absl::MutexLock lock(&pool_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_) {
        return !pool_calls_.empty() || pool_stopping_;
      };
      pool_mu_.Await(absl::Condition(&ready));
      if (pool_calls_.empty()) return;  // stopping, every call served
      call = std::move(pool_calls_.front());
      pool_calls_.pop_front();
    }
    options_.serve_call(std::move(call));
  }
}

SharedRegions::~SharedRegions() { StopCalls(); }

void SharedRegions::StopCalls() {
  std::vector<std::shared_ptr<Region>> regions;
  {
    absl::MutexLock lock(&mu_);
    calls_stopped_ = true;
    for (const auto& [id, region] : regions_) regions.push_back(region);
  }
  for (const auto& region : regions) StopRegion(region.get());
  // The pool serves what it was handed, then ends.
  {
    absl::MutexLock lock(&pool_mu_);
    pool_stopping_ = true;
  }
  for (std::thread& thread : pool_) {
    if (thread.joinable()) thread.join();
  }
}

void SharedRegions::StopRegion(Region* region) {
  if (!region->thread.joinable()) return;
  region->stopping.store(true);
  RingBell(region->bell(kServerBellOffset));
  region->thread.join();
  // The client withdraws the calls not taken.
  StoreWord(region->bell(kClosedOffset), 1);
  RingBell(region->bell(kClientBellOffset));
}

void SharedRegions::ServeCalls(Region* region) {
  pthread_setname_np(pthread_self(), "ps-shm-calls");
  uint32_t* bell = region->bell(kServerBellOffset);
  bool spin = true;
  while (!region->stopping.load()) {
    const uint32_t rung = LoadWord(bell);
    bool served = false;
    for (uint32_t i = 0; i < region->slots && !region->stopping.load(); ++i) {
      SharedCallPage* page = region->page(i);
      if (!SwapWord(&page->state, kSharedCallRequested, kSharedCallServing)) continue;
      served = true;
      Call call;
      call.taken_ = absl::Now();
      call.on_answered_ = on_answered_;
      call.slot_ = i;
      call.method_ = __atomic_load_n(&page->method, __ATOMIC_RELAXED);
      const uint32_t request_bytes = __atomic_load_n(&page->request_bytes, __ATOMIC_RELAXED);
      {
        absl::MutexLock lock(&mu_);
        const auto it = regions_.find(region->id);
        if (it == regions_.end()) return;  // closed meanwhile; its stop is on its way
        call.region_ = it->second;
      }
      if (request_bytes > sizeof(page->data)) {
        call.Answer(absl::InvalidArgumentError(absl::StrFormat(
                        "a call page says its request has %d bytes, past the page's %d",
                        request_bytes, sizeof(page->data))),
                    "");
        continue;
      }
      call.request_.assign(page->data, request_bytes);
      if (__atomic_load_n(&page->keys, __ATOMIC_RELAXED) >= kPoolKeys) {
        absl::MutexLock lock(&pool_mu_);
        if (!pool_stopping_) {
          pool_calls_.push_back(std::move(call));
          continue;
        }
      }
      options_.serve_call(std::move(call));
    }
    if (served) continue;
    // A client making small calls one after another writes its next one sooner than a sleep and
    // a wake-up would take: spin while the calls come that close, sleep at once while they do
    // not (large calls, or an idle client).
    if (spin && SpinWhile(bell, rung, kServeSpin)) continue;
    const absl::Time slept = absl::Now();
    FutexWait(bell, rung, absl::InfiniteDuration());
    spin = absl::Now() - slept < kServeSpin;
  }
}

absl::StatusOr<rpc::OpenSharedRegionResponse> SharedRegions::Open(uint32_t slots,
                                                                  uint64_t slot_bytes,
                                                                  absl::string_view peer) {
  if (options_.max_bytes == 0) {
    return absl::FailedPreconditionError(
        "this server lends no shared memory (ps_server --shared_memory_mb=0)");
  }
  if (slots < 1 || slots > kMaxSharedSlots) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a shared region has 1 to %d slots, %d were asked for", kMaxSharedSlots, slots));
  }
  if (slot_bytes < 1 || slot_bytes > kMaxSharedSlotBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a shared slot has 1 to %d bytes, %d were asked for", kMaxSharedSlotBytes, slot_bytes));
  }
  auto region = std::make_shared<Region>();
  region->slots = slots;
  region->slot_bytes = RoundUpToPage(slot_bytes);
  region->header_bytes = SharedRegionHeaderBytes(slots);
  region->bytes = region->header_bytes + uint64_t{slots} * region->slot_bytes;
  region->peer = std::string(peer);
  std::vector<std::shared_ptr<Region>> idle;
  absl::Cleanup stop_idle = [&idle] {
    for (const auto& closed : idle) StopRegion(closed.get());
  };
  {
    absl::MutexLock lock(&mu_);
    idle = TakeIdleLocked(Now() - options_.idle_timeout);
    if (bytes_ + region->bytes > options_.max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("shared regions would take %d bytes, over this server's %d (ps_server "
                          "--shared_memory_mb); %d regions are lent",
                          bytes_ + region->bytes, options_.max_bytes, regions_.size()));
    }
    region->id = next_id_++;
    // Counted now, so that two opens at once cannot both pass the limit; given back on failure.
    bytes_ += region->bytes;
  }
  auto fail = [&](const char* what) {
    const int error = errno;
    absl::MutexLock lock(&mu_);
    bytes_ -= region->bytes;
    return absl::InternalError(absl::StrFormat("shared region of %d bytes: %s: %s", region->bytes,
                                               what, std::strerror(error)));
  };
  region->fd = memfd_create("ps-shared-region", MFD_CLOEXEC);
  if (region->fd < 0) return fail("memfd_create");
  if (ftruncate(region->fd, static_cast<off_t>(region->bytes)) != 0) return fail("ftruncate");
  void* base = mmap(nullptr, region->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  region->base = static_cast<unsigned char*>(base);
  if (getrandom(region->secret, kSecretBytes, 0) != static_cast<ssize_t>(kSecretBytes)) {
    return fail("getrandom");
  }
  SharedRegionHeader header;
  std::memcpy(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic));
  header.region = region->id;
  std::memcpy(header.secret, region->secret, kSecretBytes);
  header.slots = slots;
  header.slot_bytes = region->slot_bytes;
  std::memcpy(region->base, &header, sizeof(header));

  rpc::OpenSharedRegionResponse response;
  response.set_region(region->id);
  response.set_secret(reinterpret_cast<const char*>(region->secret), kSecretBytes);
  response.set_pid(static_cast<int32_t>(getpid()));
  response.set_fd(region->fd);
  response.set_slots(slots);
  response.set_slot_bytes(region->slot_bytes);
  response.set_header_bytes(region->header_bytes);
  absl::MutexLock lock(&mu_);
  if (options_.serve_call && !calls_stopped_) {
    response.set_calls(true);
    region->thread = std::thread([this, raw = region.get()] { ServeCalls(raw); });
  }
  region->last_used = Now();
  regions_[region->id] = std::move(region);
  ++opened_;
  return response;
}

absl::Status SharedRegions::Close(uint64_t id, absl::string_view secret) {
  std::shared_ptr<Region> closed;  // stopped and unmapped outside the lock
  absl::Cleanup stop = [&closed] {
    if (closed != nullptr) StopRegion(closed.get());
  };
  absl::MutexLock lock(&mu_);
  const auto it = regions_.find(id);
  if (it == regions_.end()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shared region %d is not held by this server", id));
  }
  if (!SameSecret(secret, it->second->secret)) {
    return absl::PermissionDeniedError(absl::StrFormat("wrong secret for shared region %d", id));
  }
  closed = std::move(it->second);
  bytes_ -= closed->bytes;
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<SharedRegions::Slot> SharedRegions::Find(const rpc::SharedSlot& shared) {
  std::shared_ptr<Region> region;
  {
    absl::MutexLock lock(&mu_);
    const auto it = regions_.find(shared.region());
    if (it == regions_.end()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "shared region %d is not held by this server (closed, idle too long, or lent by a "
          "server that restarted): open another",
          shared.region()));
    }
    region = it->second;
    region->last_used = Now();
  }
  if (!SameSecret(shared.secret(), region->secret)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("wrong secret for shared region %d", shared.region()));
  }
  if (shared.slot() >= region->slots) {
    return absl::InvalidArgumentError(absl::StrFormat("slot %d of shared region %d, which has %d",
                                                      shared.slot(), shared.region(),
                                                      region->slots));
  }
  if (shared.keys_bytes() > region->slot_bytes ||
      shared.grads_bytes() > region->slot_bytes - shared.keys_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes of keys and %d of gradients do not fit a shared slot of %d bytes",
                        shared.keys_bytes(), shared.grads_bytes(), region->slot_bytes));
  }
  Slot slot;
  slot.data_ = region->base + region->header_bytes + shared.slot() * region->slot_bytes;
  slot.size_ = region->slot_bytes;
  slot.region_ = std::move(region);
  return slot;
}

std::vector<std::shared_ptr<SharedRegions::Region>> SharedRegions::TakeIdleLocked(
    absl::Time before) {
  std::vector<std::shared_ptr<Region>> idle;
  for (const auto& [id, region] : regions_) {
    if (region->last_used < before) idle.push_back(region);
  }
  for (const auto& region : idle) {
    bytes_ -= region->bytes;
    regions_.erase(region->id);
  }
  return idle;
}

void SharedRegions::FillStatus(rpc::ServerStatus* status) const {
  absl::MutexLock lock(&mu_);
  status->set_shared_regions(static_cast<uint32_t>(regions_.size()));
  status->set_shared_region_bytes(bytes_);
  status->set_shared_regions_opened(opened_);
}

size_t SharedRegions::regions() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

uint64_t SharedRegions::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

uint64_t SharedRegions::opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

}  // namespace server
}  // namespace ps
