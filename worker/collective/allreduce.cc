// The Gloo implementation of AllReduce; the NCCL one is in nccl_allreduce.cc.
#include "worker/collective/allreduce.h"

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/collective/internal/group_args.h"
#include "worker/collective/internal/shm_allreduce.h"
#include "worker/collective/kv_store.h"

namespace ps {
namespace worker {
namespace {

constexpr int kMaxStreams = 16;
constexpr size_t kMinSegmentBytes = 4096;

// Gloo reports every failure by throwing; this turns what it threw into the most specific status.
// Gloo's timeouts ("Read timeout", "Timed out waiting ...", "Wait timeout for key(s)") are I/O
// exceptions like its broken connections, so only the message tells them apart.
absl::Status StatusFromException(const std::exception& e, const std::string& what) {
  if (const auto* store_error = dynamic_cast<const KvStoreError*>(&e)) {
    const absl::Status& status = store_error->status();
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  const std::string message = absl::StrCat(what, ": ", e.what());
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    const std::string lower = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(lower, "timeout") || absl::StrContains(lower, "timed out")) {
      return absl::DeadlineExceededError(message);
    }
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

// Gloo's elementwise sum, compiled a second time for AVX2 and chosen by the CPU at load time: the
// portable build is SSE2 only, and the reduction is a visible part of a large AllReduce's time.
__attribute__((target_clones("avx2", "default"))) void SumFloats(void* out, const void* a,
                                                                 const void* b, size_t n) {
  gloo::sum<float>(out, a, b, n);
}

std::chrono::milliseconds ToMillis(absl::Duration d) {
  // Gloo reads zero as "no timeout": never round a positive duration down to it.
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// One TCP connection to every peer: a Gloo context over its own device (and so its own event
// loop thread).
struct Stream {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

class GlooAllReduce final : public AllReduce {
 public:
  GlooAllReduce(int rank, int size, absl::Duration timeout, const GlooOptions& options,
                std::vector<Stream> streams, std::unique_ptr<internal::ShmAllReduce> shm)
      : rank_(rank),
        size_(size),
        timeout_(ToMillis(timeout)),
        min_bytes_per_stream_(options.min_bytes_per_stream),
        segment_bytes_(options.segment_bytes),
        ring_min_bytes_(options.ring_min_bytes),
        streams_(std::move(streams)),
        shm_(std::move(shm)) {
    // A thread per stream after the first, for the group's life: starting them on every call
    // would cost a visible part of a MiB-sized AllReduce. Streams left without one (when the
    // system refuses threads) run on the caller's thread after the others.
    for (size_t i = 1; i < streams_.size(); ++i) {
      auto helper = std::make_unique<Helper>();
      try {
        helper->thread = std::thread([this, i, h = helper.get()] { HelperLoop(*h, i); });
      } catch (const std::exception&) {  // std::system_error
        break;
      }
      helpers_.push_back(std::move(helper));
    }
  }

  ~GlooAllReduce() override {
    {
      absl::MutexLock lock(&mu_);
      shutting_down_ = true;
      for (auto& helper : helpers_) helper->wake.Signal();
    }
    for (auto& helper : helpers_) helper->thread.join();
  }

  absl::Status SumInPlace(absl::Span<float> data) override {
    if (size_ == 1 || data.empty()) return absl::OkStatus();
    if (data.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllReduce of ", data.size(), " elements: at most 2^31 - 1"));
    }
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("AllReduce group is broken by an earlier error: ", broken_.ToString()));
    }

    const size_t bytes = data.size() * sizeof(float);
    if (shm_ != nullptr && bytes <= shm_->max_bytes()) {
      absl::Status status = shm_->SumInPlace(data, absl::Now() + absl::FromChrono(timeout_));
      if (!status.ok()) broken_ = status;
      return status;
    }

    // Every rank computes the same parts from the same element count.
    const size_t parts = std::clamp<size_t>(bytes / min_bytes_per_stream_, 1, streams_.size());
    // Parts are multiples of 16 floats: each starts a multiple of 64 bytes after the first.
    const size_t per_part = (data.size() / parts + 15) / 16 * 16;
    std::vector<absl::Span<float>> spans(parts);
    for (size_t i = 0; i < parts; ++i) {
      const size_t begin = std::min(data.size(), i * per_part);
      const size_t end = i + 1 == parts ? data.size() : std::min(data.size(), begin + per_part);
      spans[i] = data.subspan(begin, end - begin);
    }

    // Streams are independent groups, so a part that gets no helper of its own can run after the
    // others on this thread without deadlocking the peers.
    const size_t helped = std::min(parts - 1, helpers_.size());
    std::vector<absl::Status> statuses(parts);
    {
      absl::MutexLock lock(&mu_);
      pending_ = helped;
      for (size_t i = 1; i <= helped; ++i) {
        Helper& helper = *helpers_[i - 1];
        helper.part = spans[i];
        helper.has_work = true;
        helper.wake.Signal();
      }
    }
    statuses[0] = Run(streams_[0], spans[0]);
    for (size_t i = 1 + helped; i < parts; ++i) statuses[i] = Run(streams_[i], spans[i]);
    {
      absl::MutexLock lock(&mu_);
      while (pending_ > 0) helpers_done_.Wait(&mu_);
      for (size_t i = 1; i <= helped; ++i) statuses[i] = std::move(helpers_[i - 1]->status);
    }

    for (absl::Status& status : statuses) {
      if (!status.ok()) {
        broken_ = status;
        return status;
      }
    }
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool shared_memory() const override { return shm_ != nullptr; }

 private:
  // A thread that reduces stream `stream`'s part of the calls that have one. Waits with the
  // members guarded by mu_ only: a call wakes just the helpers it has work for.
  struct Helper {
    std::thread thread;
    absl::CondVar wake;
    bool has_work = false;     // guarded by mu_
    absl::Span<float> part;    // guarded by mu_
    absl::Status status;       // guarded by mu_: the last part's outcome
  };

  void HelperLoop(Helper& helper, size_t stream) {
    for (;;) {
      absl::Span<float> part;
      {
        absl::MutexLock lock(&mu_);
        while (!shutting_down_ && !helper.has_work) helper.wake.Wait(&mu_);
        if (shutting_down_) return;
        helper.has_work = false;
        part = helper.part;
      }
      absl::Status status = Run(streams_[stream], part);
      absl::MutexLock lock(&mu_);
      helper.status = std::move(status);
      if (--pending_ == 0) helpers_done_.Signal();
    }
  }

  absl::Status Run(const Stream& stream, absl::Span<float> part) const {
    if (part.empty()) return absl::OkStatus();
    try {
      gloo::AllreduceOptions options(stream.context);
      options.setOutput(part.data(), part.size());
      options.setReduceFunction(&SumFloats);
      options.setMaxSegmentSize(segment_bytes_);
      options.setTimeout(timeout_);
      options.setAlgorithm(part.size() * sizeof(float) >= ring_min_bytes_
                               ? gloo::AllreduceOptions::Algorithm::RING
                               : gloo::AllreduceOptions::Algorithm::BCUBE);
      gloo::allreduce(options);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e, absl::StrCat("AllReduce of ", part.size(), " floats"));
    }
  }

  // Constant after construction.
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const size_t min_bytes_per_stream_;
  const size_t segment_bytes_;
  const size_t ring_min_bytes_;
  const std::vector<Stream> streams_;
  // The group's shared memory when every rank is on this host; null otherwise.
  const std::unique_ptr<internal::ShmAllReduce> shm_;
  std::vector<std::unique_ptr<Helper>> helpers_;  // [i]: stream i + 1's

  // The first error of SumInPlace; OK while the group works. Only the caller's thread uses it.
  absl::Status broken_;

  // The current call, handed to the helpers.
  absl::Mutex mu_;
  absl::CondVar helpers_done_;  // pending_ reached 0
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // helpers still working on this call
};

}  // namespace

absl::StatusOr<std::unique_ptr<AllReduce>> AllReduce::CreateGloo(CoordinatorClient* coordinator,
                                                                 const std::string& group, int rank,
                                                                 int size, absl::Duration timeout) {
  return CreateGloo(coordinator, group, rank, size, timeout, GlooOptions());
}

absl::StatusOr<std::unique_ptr<AllReduce>> AllReduce::CreateGloo(CoordinatorClient* coordinator,
                                                                 const std::string& group, int rank,
                                                                 int size, absl::Duration timeout,
                                                                 const GlooOptions& options) {
  absl::Status valid = internal::ValidateGroupArgs(coordinator, group, rank, size, timeout);
  if (!valid.ok()) return valid;
  if (options.streams < 1 || options.streams > kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams must be in [1, ", kMaxStreams, "], got ", options.streams));
  }
  if (options.min_bytes_per_stream == 0) {
    return absl::InvalidArgumentError("min_bytes_per_stream must be positive");
  }
  if (options.segment_bytes < kMinSegmentBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment_bytes must be at least ", kMinSegmentBytes, ", got ", options.segment_bytes));
  }
  if (options.shared_memory_slot_bytes == 0 || options.shared_memory_slot_bytes % 64 != 0 ||
      options.shared_memory_slot_bytes > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared_memory_slot_bytes must be a positive multiple of 64 of at most 1 GiB, "
                     "got ",
                     options.shared_memory_slot_bytes));
  }
  if (size == 1) {
    return std::unique_ptr<AllReduce>(new GlooAllReduce(rank, size, timeout, options, {}, nullptr));
  }

  const absl::Time deadline = absl::Now() + timeout;
  std::vector<Stream> streams(options.streams);
  for (int i = 0; i < options.streams; ++i) {
    const std::string what =
        absl::StrCat("Gloo group \"", group, "\" rank ", rank, " of ", size, ", connection ", i);
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.hostname;
      attr.iface = options.iface;
      streams[i].device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      // Gloo asserts (rather than throws I/O errors) when the address cannot be resolved or bound.
      return absl::UnavailableError(
          absl::StrCat(what, ": cannot listen on ", options.iface.empty() ? "host " : "interface ",
                       options.iface.empty() ? options.hostname : options.iface, ": ", e.what()));
    }
    try {
      // Each connection has its own keys; the wait for the peers' addresses ends at `deadline`.
      KvStore store(coordinator, absl::StrCat("collective/gloo/", group, "/", i, "/"),
                    deadline - absl::Now());
      streams[i].context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      streams[i].context->setTimeout(ToMillis(deadline - absl::Now()));
      streams[i].context->connectFullMesh(store, streams[i].device);
    } catch (const std::exception& e) {
      return StatusFromException(e, what);
    }
  }
  // Gloo's contexts are there for every group: buffers over the shared memory's limit go to them.
  absl::StatusOr<std::unique_ptr<internal::ShmAllReduce>> shm = internal::ShmAllReduce::Join(
      coordinator, group, rank, size, options.shared_memory, internal::HostIdentity(),
      options.shared_memory_slot_bytes, options.shared_memory_max_bytes, deadline);
  if (!shm.ok()) {
    return absl::Status(shm.status().code(),
                        absl::StrCat("Gloo group \"", group, "\" rank ", rank, " of ", size,
                                     ", shared memory: ", shm.status().message()));
  }
  return std::unique_ptr<AllReduce>(
      new GlooAllReduce(rank, size, timeout, options, std::move(streams), *std::move(shm)));
}

}  // namespace worker
}  // namespace ps
