#include "client/internal/shared_region.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/futex.h"
#include "common/shared_region_layout.h"

namespace ps {
namespace client_internal {
namespace {

// How long a caller waiting for its own call (Call's wait_here) spins before it sleeps. Measured
// with ps_bench at 1000 keys on 2 cores (tests/bench/README.md).
constexpr absl::Duration kCallerSpin = absl::Microseconds(50);

}  // namespace

// The calls made in a region, shared by the region and its waiting thread.
struct SharedRegion::Calls {
  struct Pending {
    bool active = false;
    absl::Time deadline;
    CallDone done;
  };

  Calls() = default;
  Calls(const Calls&) = delete;
  Calls& operator=(const Calls&) = delete;
  ~Calls() {
    if (pidfd >= 0) close(pidfd);
  }

  SharedCallPage* page(uint32_t slot) const {
    return reinterpret_cast<SharedCallPage*>(base + kSharedPageBytes * (1 + uint64_t{slot}));
  }
  uint32_t* bell(size_t offset) const { return reinterpret_cast<uint32_t*>(base + offset); }

  // Whether the server's process has exited (its pidfd is readable; without one, its pid is gone).
  bool ServerExited() const {
    if (pidfd >= 0) {
      pollfd polled{pidfd, POLLIN, 0};
      return poll(&polled, 1, 0) > 0;
    }
    return kill(pid, 0) != 0 && errno == ESRCH;
  }

  // How a call ended.
  struct Ended {
    CallDone done;
    absl::Status status;
    std::string response;
    bool answered = false;
  };

  // Whether the call in `slot` has ended, and how (into *end): answered; withdrawn, the region
  // being `closed`; the server `exited`; or past `deadline` at `now`.
  bool TryEnd(uint32_t slot, bool closed, bool exited, absl::Time now, absl::Time deadline,
              Ended* end) const;

  // The waiting thread: hands each answered call, each call past its deadline and, once the
  // server's process has exited, every call to its `done`; sleeps on the client's bell between.
  static void Wait(std::shared_ptr<Calls> calls);

  // Waits on the calling thread for the call in `slot` to end (as Wait would end it).
  Ended WaitHere(uint32_t slot, absl::Time deadline) const;

  std::shared_ptr<void> mapping;  // the pages stay mapped while the thread runs
  unsigned char* base = nullptr;
  uint64_t region = 0;
  int pid = 0;
  int pidfd = -1;

  // Whether the calls waited for here (WaitHere) are answered within kCallerSpin.
  mutable std::atomic<bool> spin_pays{true};

  absl::Mutex mu;
  std::vector<Pending> pending ABSL_GUARDED_BY(mu);  // by slot
  bool stop ABSL_GUARDED_BY(mu) = false;
};

bool SharedRegion::Calls::TryEnd(uint32_t slot, bool closed, bool exited, absl::Time now,
                                 absl::Time deadline, Ended* end) const {
  SharedCallPage* page = this->page(slot);
  if (LoadWord(&page->state) == kSharedCallAnswered) {
    const uint32_t bytes = std::min<uint32_t>(page->answer_bytes, sizeof(page->data));
    const int32_t code = page->code;
    if (code == 0) {
      end->response.assign(page->data, bytes);
    } else if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
      end->status = absl::InternalError(absl::StrFormat(
          "the server answered a call in shared region %d with status code %d", region, code));
    } else {
      end->status =
          absl::Status(static_cast<absl::StatusCode>(code), absl::string_view(page->data, bytes));
    }
    end->answered = true;
    StoreWord(&page->state, kSharedCallIdle);
  } else if (closed && SwapWord(&page->state, kSharedCallRequested, kSharedCallIdle)) {
    end->status = absl::FailedPreconditionError(absl::StrFormat(
        "shared region %d was closed by the server (given back, idle too long, or the server is "
        "stopping) before it took the call: open another",
        region));
  } else if (exited) {
    end->status = absl::UnavailableError(absl::StrFormat(
        "the process (pid %d) of the server that lent shared region %d exited", pid, region));
  } else if (now >= deadline) {
    end->status = absl::DeadlineExceededError(
        absl::StrFormat("no answer to a call in shared region %d by its deadline", region));
  } else {
    return false;
  }
  return true;
}

void SharedRegion::Calls::Wait(std::shared_ptr<Calls> calls) {
  pthread_setname_np(pthread_self(), "ps-shm-answers");
  uint32_t* bell = calls->bell(kClientBellOffset);
  std::vector<Ended> ended;
  absl::Time next_check = absl::Now() + kLivenessPeriod;
  while (true) {
    const uint32_t rung = LoadWord(bell);
    const absl::Time now = absl::Now();
    absl::Time wake = now + kLivenessPeriod;
    {
      absl::MutexLock lock(&calls->mu);
      if (calls->stop) return;
      bool any = false;
      for (const Pending& p : calls->pending) any |= p.active;
      bool exited = false;
      if (any && now >= next_check) {
        exited = calls->ServerExited();
        next_check = now + kLivenessPeriod;
      }
      const bool closed = LoadWord(calls->bell(kClosedOffset)) != 0;
      for (uint32_t slot = 0; slot < calls->pending.size(); ++slot) {
        Pending& pending = calls->pending[slot];
        if (!pending.active) continue;
        Ended end;
        if (!calls->TryEnd(slot, closed, exited, now, pending.deadline, &end)) {
          wake = std::min(wake, pending.deadline);
          continue;
        }
        end.done = std::move(pending.done);
        pending = Pending();
        ended.push_back(std::move(end));
      }
    }
    for (Ended& end : ended) end.done(end.status, std::move(end.response), end.answered);
    if (!ended.empty()) {
      ended.clear();
      continue;
    }
    FutexWait(bell, rung, wake - now);
  }
}

SharedRegion::Calls::Ended SharedRegion::Calls::WaitHere(uint32_t slot, absl::Time deadline) const {
  uint32_t* bell = this->bell(kClientBellOffset);
  absl::Time next_check = absl::Now() + kLivenessPeriod;
  Ended end;
  while (true) {
    const uint32_t rung = LoadWord(bell);
    const absl::Time now = absl::Now();
    bool exited = false;
    if (now >= next_check) {
      exited = ServerExited();
      next_check = now + kLivenessPeriod;
    }
    const bool closed = LoadWord(this->bell(kClosedOffset)) != 0;
    if (TryEnd(slot, closed, exited, now, deadline, &end)) return end;
    // The answer of a small call often comes sooner than a sleep and a wake-up would take: spin
    // while answers come that soon, sleep at once while they do not (large calls).
    if (spin_pays.load(std::memory_order_relaxed)) {
      if (SpinWhile(bell, rung, kCallerSpin)) continue;
      spin_pays.store(false, std::memory_order_relaxed);
    }
    FutexWait(bell, rung, std::min(deadline, next_check) - now);
    if (absl::Now() - now < kCallerSpin) spin_pays.store(true, std::memory_order_relaxed);
  }
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Map(
    const rpc::OpenSharedRegionResponse& lent, bool calls) {
  if (lent.header_bytes() != SharedRegionHeaderBytes(lent.slots()) || lent.slots() == 0 ||
      lent.slot_bytes() == 0 || lent.slot_bytes() % 4096 != 0 || lent.secret().size() != 16 ||
      lent.pid() <= 0 || lent.fd() < 0 || lent.slots() > kMaxSharedSlots ||
      lent.slot_bytes() > kMaxSharedSlotBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the server's OpenSharedRegion answer does not describe a region (%d slots of %d bytes "
        "after %d, pid %d, fd %d)",
        lent.slots(), lent.slot_bytes(), lent.header_bytes(), lent.pid(), lent.fd()));
  }
  const std::string path = absl::StrFormat("/proc/%d/fd/%d", lent.pid(), lent.fd());
  const uint64_t bytes = lent.header_bytes() + uint64_t{lent.slots()} * lent.slot_bytes();
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot open the server's shared region %s: %s (a server on another host, in another "
        "pid namespace, or of another user)",
        path, std::strerror(errno)));
  }
  struct stat st;
  const bool sized = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == bytes;
  void* base = sized ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_error = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not the server's shared region of %d bytes%s", path, bytes,
        sized ? absl::StrCat(" (mmap: ", std::strerror(map_error), ")") : std::string()));
  }
  SharedRegionHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic)) != 0 ||
      header.region != lent.region() ||
      std::memcmp(header.secret, lent.secret().data(), sizeof(header.secret)) != 0 ||
      header.slots != lent.slots() || header.slot_bytes != lent.slot_bytes()) {
    munmap(base, bytes);
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not the server's shared region %d (its header differs: a server on another host "
        "or in another pid namespace)",
        path, lent.region()));
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion());
  region->id_ = lent.region();
  region->secret_ = lent.secret();
  region->slots_ = lent.slots();
  region->slot_bytes_ = lent.slot_bytes();
  region->mapping_ = std::shared_ptr<void>(base, [bytes](void* mapped) { munmap(mapped, bytes); });
  region->base_ = static_cast<unsigned char*>(base);
  region->slots_base_ = region->base_ + lent.header_bytes();
  for (int i = static_cast<int>(lent.slots()) - 1; i >= 0; --i) region->free_.push_back(i);
  if (lent.calls() && calls) {
    auto state = std::make_shared<Calls>();
    state->mapping = region->mapping_;
    state->base = region->base_;
    state->region = lent.region();
    state->pid = lent.pid();
    state->pidfd = static_cast<int>(syscall(SYS_pidfd_open, lent.pid(), 0));
    {
      absl::MutexLock lock(&state->mu);
      state->pending.resize(lent.slots());
    }
    region->calls_ = state;
    region->waiter_ = std::thread([state] { Calls::Wait(state); });
  }
  return region;
}

SharedRegion::~SharedRegion() {
  if (calls_ == nullptr) return;
  {
    absl::MutexLock lock(&calls_->mu);
    calls_->stop = true;
  }
  RingBell(calls_->bell(kClientBellOffset));
  // The last holder may be a call's `done`, on the waiting thread itself: that thread then ends
  // on its own, holding the calls' state and the mapping until it does.
  if (waiter_.get_id() == std::this_thread::get_id()) {
    waiter_.detach();
  } else {
    waiter_.join();
  }
}

bool SharedRegion::Call(int slot, uint32_t method, const google::protobuf::MessageLite& request,
                        uint32_t keys, absl::Time deadline, CallDone done, bool wait_here) {
  // Once the call is published, its answer may end it on the waiting thread, and `done` may drop
  // the last reference to this region: from then on only locals are touched, `calls` keeping the
  // pages mapped.
  const std::shared_ptr<Calls> calls = calls_;
  if (calls == nullptr || slot < 0 || static_cast<uint32_t>(slot) >= slots_ ||
      LoadWord(calls->bell(kClosedOffset)) != 0) {
    return false;
  }
  SharedCallPage* page = calls->page(static_cast<uint32_t>(slot));
  const size_t bytes = request.ByteSizeLong();
  if (bytes > sizeof(page->data)) return false;
  request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(page->data));
  page->method = method;
  page->request_bytes = static_cast<uint32_t>(bytes);
  page->keys = keys;
  if (wait_here) {
    // Not the waiting thread's: this thread waits for it.
    StoreWord(&page->state, kSharedCallRequested);
    RingBell(calls->bell(kServerBellOffset));
    Calls::Ended end = calls->WaitHere(static_cast<uint32_t>(slot), deadline);
    done(end.status, std::move(end.response), end.answered);
    return true;
  }
  {
    absl::MutexLock lock(&calls->mu);
    Calls::Pending& pending = calls->pending[static_cast<uint32_t>(slot)];
    pending.active = true;
    pending.deadline = deadline;
    pending.done = std::move(done);
  }
  StoreWord(&page->state, kSharedCallRequested);
  RingBell(calls->bell(kServerBellOffset));
  return true;
}

int SharedRegion::Acquire() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void SharedRegion::Release(int slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

void SharedRegion::Retire(int /*slot*/) {
  absl::MutexLock lock(&mu_);
  ++retired_;
}

uint32_t SharedRegion::retired() const {
  absl::MutexLock lock(&mu_);
  return retired_;
}

}  // namespace client_internal
}  // namespace ps
