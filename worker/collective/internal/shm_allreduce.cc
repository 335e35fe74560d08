#include "worker/collective/internal/shm_allreduce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/futex.h"

namespace ps {
namespace worker {
namespace internal {
namespace {

constexpr uint64_t kMagic = 0x70732d73686d6172;  // "ps-shmar"
constexpr size_t kPage = 4096;
constexpr size_t kLine = 64;
constexpr size_t kMaxSlotBytes = size_t{1} << 30;
// How long a barrier spins before it sleeps: about what a peer's copy of a few hundred KiB takes,
// and less than a futex sleep and wake-up cost together on a busy machine.
constexpr absl::Duration kSpin = absl::Microseconds(50);
// Then, up to this long, giving the processor up between looks (YieldWhile): ranks leave the
// previous step's work at moments apart by more than kSpin (a TCP wake-up, a page fault), and a
// futex's sleep and wake then cost more than the wait (128 KiB: 0.16 ms an AllReduce against
// 0.04 when the peers met within the spin, 2 ranks on this 2-core machine).
constexpr absl::Duration kYield = absl::Milliseconds(1);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// out[i] = a[i] + b[i], compiled a second time for AVX2 and chosen at load time. Plain float
// additions element by element (no reassociation), so every rank that sums the same slots in the
// same order gets the same bits. `out` may be `a`.
__attribute__((target_clones("avx2", "default"))) void Add(float* out, const float* a,
                                                           const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// out[i] = out2[i] = a[i] + b[i]: the last addition of a part, written to the result area and
// the rank's own buffer in one pass. Either output may be `a` or `b`.
__attribute__((target_clones("avx2", "default"))) void Add2(float* out, float* out2, const float* a,
                                                            const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float sum = a[i] + b[i];
    out[i] = sum;
    out2[i] = sum;
  }
}

bool RandomBytes(void* out, size_t n) {
  auto* bytes = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(bytes, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

// The segment's name: the group's, reduced to characters a file name takes, and random bytes, so
// that groups of the same name in different jobs on one host (parallel tests) never meet.
std::string SegmentName(const std::string& group, uint64_t random) {
  std::string name = "/ps-allreduce-";
  for (const char c : group.substr(0, 64)) {
    name += absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  }
  return absl::StrCat(name, "-", absl::Hex(random, absl::kZeroPad16));
}

// The keys "<prefix><what>/0" ... "<prefix><what>/<size - 1>".
std::vector<std::string> RankKeys(const std::string& prefix, const std::string& what, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(absl::StrCat(prefix, what, "/", r));
  return keys;
}

}  // namespace

// Page 0 of the segment. Rank 0 writes the constant fields before it publishes the segment's name;
// the barrier's words change under atomics only.
struct ShmAllReduce::Header {
  uint64_t magic;
  uint64_t random[2];
  uint64_t ranks;
  uint64_t slot_bytes;
  uint64_t max_bytes;
  alignas(kLine) uint32_t arrived;     // ranks at the current barrier
  alignas(kLine) uint32_t generation;  // barriers passed; what waiters sleep on
  uint32_t sleepers;                   // ranks sleeping (or about to) on `generation`
};

namespace {

// Where things are in a segment of `ranks` slots of `slot_bytes`: the header page, each rank's
// element count on a line of its own, two sets of slots (one a rank each; chunks use them in
// turn), and two result areas.
struct Layout {
  size_t counts;
  size_t slots;
  size_t results;
  size_t total;
};

Layout LayoutOf(size_t ranks, size_t slot_bytes) {
  Layout layout;
  layout.counts = kPage;
  layout.slots = layout.counts + RoundUp(ranks * kLine, kPage);
  layout.results = layout.slots + 2 * ranks * slot_bytes;
  layout.total = RoundUp(layout.results + 2 * slot_bytes, kPage);
  return layout;
}

}  // namespace

std::string HostIdentity() {
  char host[256] = {};
  const bool named = gethostname(host, sizeof(host) - 1) == 0;
  const std::string boot = ReadFirstLine("/proc/sys/kernel/random/boot_id");
  char ipc[256] = {};
  const ssize_t ipc_length = readlink("/proc/self/ns/ipc", ipc, sizeof(ipc) - 1);
  if (!named || boot.empty() || ipc_length <= 0) {
    uint64_t random[2] = {};
    RandomBytes(random, sizeof(random));
    return absl::StrCat("unshared:", getpid(), ":", absl::Hex(random[0]), absl::Hex(random[1]));
  }
  return absl::StrCat(host, "\n", boot, "\n", std::string(ipc, ipc_length));
}

absl::StatusOr<std::unique_ptr<ShmAllReduce>> ShmAllReduce::Join(
    CoordinatorClient* coordinator, const std::string& group, int rank, int size, bool enable,
    const std::string& host_identity, size_t slot_bytes, size_t max_bytes, absl::Time deadline) {
  if (size < 2) return absl::InvalidArgumentError(absl::StrCat("group size ", size, " < 2"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside [0, ", size, ")"));
  }
  if (slot_bytes == 0 || slot_bytes % kLine != 0 || slot_bytes > kMaxSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory slot of ", slot_bytes, " bytes: a positive multiple of 64, at most 1 GiB"));
  }
  const std::string prefix = absl::StrCat("collective/shm/", group, "/");
  auto wait = [&](const std::vector<std::string>& keys) {
    return coordinator->KvWait(keys, std::max(absl::ZeroDuration(), deadline - absl::Now()));
  };

  // 1. Is every rank on this host, and willing?
  absl::Status status = coordinator->KvSet(absl::StrCat(prefix, "host/", rank),
                                           enable ? host_identity : std::string());
  if (!status.ok()) return status;
  absl::StatusOr<std::vector<std::string>> hosts = wait(RankKeys(prefix, "host", size));
  if (!hosts.ok()) return hosts.status();
  for (const std::string& host : *hosts) {
    if (host.empty() || host != (*hosts)[0]) return nullptr;
  }

  // 2. Rank 0 creates the segment; every rank maps it and says whether it could.
  std::string name;
  void* base = MAP_FAILED;
  size_t mapped_bytes = 0;
  if (rank == 0) {
    uint64_t random[2] = {};
    std::string published = "-";
    if (RandomBytes(random, sizeof(random))) {
      name = SegmentName(group, random[0]);
      const Layout layout = LayoutOf(size, slot_bytes);
      const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) {
        name.clear();
      } else {
        // Reserve every page now: a /dev/shm too small fails here rather than with SIGBUS later.
        if (ftruncate(fd, layout.total) == 0 && posix_fallocate(fd, 0, layout.total) == 0) {
          base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        close(fd);
      }
      if (base != MAP_FAILED) {
        mapped_bytes = layout.total;
        auto* header = static_cast<Header*>(base);
        header->magic = kMagic;
        header->random[0] = random[0];
        header->random[1] = random[1];
        header->ranks = size;
        header->slot_bytes = slot_bytes;
        header->max_bytes = max_bytes;
        published =
            absl::StrCat(name, " ", random[0], " ", random[1], " ", slot_bytes, " ", max_bytes);
      }
    }
    status = coordinator->KvSet(prefix + "segment", published);
    if (status.ok()) {
      status = coordinator->KvSet(prefix + "mapped/0", base != MAP_FAILED ? "1" : "0");
    }
  } else {
    absl::StatusOr<std::vector<std::string>> segment = wait({prefix + "segment"});
    if (!segment.ok()) return segment.status();
    const std::vector<std::string> fields = absl::StrSplit((*segment)[0], ' ');
    uint64_t random[2] = {};
    if (fields.size() == 5 && absl::SimpleAtoi(fields[1], &random[0]) &&
        absl::SimpleAtoi(fields[2], &random[1]) && absl::SimpleAtoi(fields[3], &slot_bytes) &&
        absl::SimpleAtoi(fields[4], &max_bytes) && slot_bytes > 0 && slot_bytes % kLine == 0 &&
        slot_bytes <= kMaxSlotBytes) {
      const Layout layout = LayoutOf(size, slot_bytes);
      const int fd = shm_open(fields[0].c_str(), O_RDWR | O_CLOEXEC, 0);
      struct stat st = {};
      if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == layout.total) {
        base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
      if (fd >= 0) close(fd);
      if (base != MAP_FAILED) {
        mapped_bytes = layout.total;
        // Another /dev/shm (mount namespace) may hold a segment of the same name by chance only
        // with the same random bytes, which it does not.
        const auto* header = static_cast<const Header*>(base);
        if (header->magic != kMagic || header->random[0] != random[0] ||
            header->random[1] != random[1] || header->ranks != static_cast<uint64_t>(size) ||
            header->slot_bytes != slot_bytes) {
          munmap(base, mapped_bytes);
          base = MAP_FAILED;
        }
      }
    }
    status =
        coordinator->KvSet(absl::StrCat(prefix, "mapped/", rank), base != MAP_FAILED ? "1" : "0");
  }
  absl::StatusOr<std::vector<std::string>> mapped =
      status.ok() ? wait(RankKeys(prefix, "mapped", size))
                  : absl::StatusOr<std::vector<std::string>>(status);
  // Every rank has mapped it or given up (or the wait failed): the name is no longer needed.
  if (!name.empty()) shm_unlink(name.c_str());
  const bool everyone = mapped.ok() && std::all_of(mapped->begin(), mapped->end(),
                                                   [](const std::string& v) { return v == "1"; });
  if (!everyone) {
    if (base != MAP_FAILED) munmap(base, mapped_bytes);
    if (!mapped.ok()) return mapped.status();
    return nullptr;
  }
  return std::unique_ptr<ShmAllReduce>(new ShmAllReduce(rank, size, base, mapped_bytes));
}

ShmAllReduce::ShmAllReduce(int rank, int size, void* base, size_t mapped_bytes)
    : rank_(rank),
      size_(size),
      base_(base),
      mapped_bytes_(mapped_bytes),
      header_(static_cast<Header*>(base)),
      slot_bytes_(header_->slot_bytes),
      max_bytes_(header_->max_bytes),
      spin_(static_cast<unsigned>(size) <= std::max(1u, std::thread::hardware_concurrency())) {
  static_assert(sizeof(Header) <= kPage, "the header is one page");
}

ShmAllReduce::~ShmAllReduce() { munmap(base_, mapped_bytes_); }

float* ShmAllReduce::Slot(int set, int rank) const {
  const Layout layout = LayoutOf(size_, slot_bytes_);
  return reinterpret_cast<float*>(static_cast<char*>(base_) + layout.slots +
                                  (size_t(set) * size_ + rank) * slot_bytes_);
}

float* ShmAllReduce::Result(int which) const {
  const Layout layout = LayoutOf(size_, slot_bytes_);
  return reinterpret_cast<float*>(static_cast<char*>(base_) + layout.results + which * slot_bytes_);
}

uint64_t* ShmAllReduce::Count(int rank) const {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + kPage + rank * kLine);
}

absl::Status ShmAllReduce::Barrier(absl::Time deadline) {
  // The generation cannot move before this rank arrives, so reading it first is safe.
  const uint32_t generation = LoadWord(&header_->generation);
  if (__atomic_add_fetch(&header_->arrived, 1, __ATOMIC_SEQ_CST) == static_cast<uint32_t>(size_)) {
    StoreWord(&header_->arrived, 0);
    __atomic_add_fetch(&header_->generation, 1, __ATOMIC_SEQ_CST);
    // A sleeper counts itself before it re-checks the generation, so either it sees the new one
    // or this sees it counted (both sequentially consistent).
    if (LoadWord(&header_->sleepers) > 0) FutexWakeAll(&header_->generation);
    return absl::OkStatus();
  }
  if (spin_ && SpinWhile(&header_->generation, generation, kSpin)) return absl::OkStatus();
  if (YieldWhile(&header_->generation, generation, kYield)) return absl::OkStatus();
  while (LoadWord(&header_->generation) == generation) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          "AllReduce in shared memory: a peer did not reach the barrier within the timeout");
    }
    __atomic_add_fetch(&header_->sleepers, 1, __ATOMIC_SEQ_CST);
    if (LoadWord(&header_->generation) == generation) {
      FutexWait(&header_->generation, generation, left);
    }
    __atomic_sub_fetch(&header_->sleepers, 1, __ATOMIC_SEQ_CST);
  }
  return absl::OkStatus();
}

absl::Status ShmAllReduce::SumInPlace(absl::Span<float> data, absl::Time deadline) {
  // Chunk k of the buffer: each rank copies the parts the others sum into its slot of set
  // `phase_`, all meet at a barrier, then each copies out the sums of chunk k - 1 (computed before
  // that barrier), and sums its own part of chunk k (its values, the others' slots) into result
  // area `phase_` and its own buffer. The
  // sets and areas alternate, so one barrier a chunk keeps every slot and area from being written
  // before every rank is done reading it (two chunks later); one more barrier ends the call.
  const size_t n = data.size();
  if (n == 0) return absl::OkStatus();
  const size_t chunk = slot_bytes_ / sizeof(float);
  size_t prev_offset = 0, prev_m = 0, prev_begin = 0, prev_end = 0;
  const auto copy_out_previous = [&] {
    // The other ranks' parts of the previous chunk (this rank's went to `data` as it summed).
    const float* sums = Result(phase_ ^ 1);
    float* to = data.data() + prev_offset;
    std::memcpy(to, sums, prev_begin * sizeof(float));
    std::memcpy(to + prev_end, sums + prev_end, (prev_m - prev_end) * sizeof(float));
  };
  for (size_t offset = 0; offset < n; offset += chunk) {
    const size_t m = std::min(chunk, n - offset);
    // This rank's part of the chunk: parts are multiples of 16 floats (a cache line), so that no
    // two ranks write one line.
    const size_t per = RoundUp((m + size_ - 1) / size_, kLine / sizeof(float));
    const size_t begin = std::min(m, rank_ * per);
    const size_t end = std::min(m, begin + per);
    // The other ranks sum the rest: only that goes into the slot.
    const float* const mine = data.data() + offset;
    float* const slot = Slot(phase_, rank_);
    std::memcpy(slot, mine, begin * sizeof(float));
    std::memcpy(slot + end, mine + end, (m - end) * sizeof(float));
    if (offset == 0) __atomic_store_n(Count(rank_), uint64_t{n}, __ATOMIC_SEQ_CST);
    absl::Status status = Barrier(deadline);
    if (!status.ok()) return status;
    if (offset == 0) {
      for (int r = 0; r < size_; ++r) {
        const uint64_t count = __atomic_load_n(Count(r), __ATOMIC_SEQ_CST);
        if (count != n) {
          return absl::InternalError(absl::StrCat("AllReduce of ", n, " floats: rank ", r,
                                                  " reduces ", count, " (counts must agree)"));
        }
      }
    } else {
      copy_out_previous();
    }
    // The sum of this rank's part, in rank order (this rank's values from its own buffer).
    const auto values = [&](int r) { return r == rank_ ? mine : Slot(phase_, r); };
    float* const out = Result(phase_);
    if (end > begin) {
      float* const own = data.data() + offset + begin;
      const float* sum = values(0) + begin;  // the sum so far
      for (int r = 1; r + 1 < size_; ++r) {
        Add(out + begin, sum, values(r) + begin, end - begin);
        sum = out + begin;
      }
      Add2(out + begin, own, sum, values(size_ - 1) + begin, end - begin);
    }
    prev_offset = offset;
    prev_m = m;
    prev_begin = begin;
    prev_end = end;
    phase_ ^= 1;
  }
  absl::Status status = Barrier(deadline);
  if (!status.ok()) return status;
  copy_out_previous();
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace worker
}  // namespace ps
