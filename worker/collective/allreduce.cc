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
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/collective/internal/group_args.h"
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
                std::vector<Stream> streams)
      : rank_(rank),
        size_(size),
        timeout_(ToMillis(timeout)),
        min_bytes_per_stream_(options.min_bytes_per_stream),
        segment_bytes_(options.segment_bytes),
        streams_(std::move(streams)) {}

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

    // Every rank computes the same parts from the same element count.
    const size_t bytes = data.size() * sizeof(float);
    const size_t parts = std::clamp<size_t>(bytes / min_bytes_per_stream_, 1, streams_.size());
    // Parts are multiples of 16 floats: each starts a multiple of 64 bytes after the first.
    const size_t per_part = (data.size() / parts + 15) / 16 * 16;

    auto part = [&](size_t i) {
      const size_t begin = std::min(data.size(), i * per_part);
      const size_t end = i + 1 == parts ? data.size() : std::min(data.size(), begin + per_part);
      return data.subspan(begin, end - begin);
    };
    // Streams are independent groups, so a part that gets no thread of its own can run after the
    // others on this one without deadlocking the peers.
    std::vector<absl::Status> statuses(parts);
    std::vector<std::thread> threads;
    size_t inline_from = parts;
    for (size_t i = 1; i < parts; ++i) {
      try {
        threads.emplace_back(
            [this, i, &statuses, p = part(i)] { statuses[i] = Run(streams_[i], p); });
      } catch (const std::exception&) {  // std::system_error or std::bad_alloc
        inline_from = i;
        break;
      }
    }
    statuses[0] = Run(streams_[0], part(0));
    for (size_t i = inline_from; i < parts; ++i) statuses[i] = Run(streams_[i], part(i));
    for (std::thread& thread : threads) thread.join();

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

 private:
  absl::Status Run(const Stream& stream, absl::Span<float> part) const {
    if (part.empty()) return absl::OkStatus();
    try {
      gloo::AllreduceOptions options(stream.context);
      options.setOutput(part.data(), part.size());
      options.setReduceFunction(&SumFloats);
      options.setMaxSegmentSize(segment_bytes_);
      options.setTimeout(timeout_);
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
  const std::vector<Stream> streams_;

  // The first error of SumInPlace; OK while the group works.
  absl::Status broken_;
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
  if (size == 1) {
    return std::unique_ptr<AllReduce>(new GlooAllReduce(rank, size, timeout, options, {}));
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
  return std::unique_ptr<AllReduce>(
      new GlooAllReduce(rank, size, timeout, options, std::move(streams)));
}

}  // namespace worker
}  // namespace ps
