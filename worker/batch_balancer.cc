#include "worker/batch_balancer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps {
namespace worker {
namespace {

// How far one Update() moves a worker's speed towards the interval's measure, and the shares
// towards the speeds' proportions: a half keeps one noisy interval from swinging the batches
// while still converging in a few intervals.
constexpr double kStep = 0.5;

}  // namespace

BatchBalancer::BatchBalancer(int world, int batch_size)
    : world_(std::max(1, world)),
      total_(std::max(1, world) * std::max(1, batch_size)),
      shares_(world_, std::max(1, batch_size)),
      speed_(world_, 0.0) {}

void BatchBalancer::Record(int samples, absl::Duration busy) {
  samples_ += std::max(0, samples);
  busy_ms_ += std::max(0.0, absl::ToDoubleMilliseconds(busy));
}

void BatchBalancer::Report(int rank, absl::Span<float> out) const {
  if (rank < 0 || rank >= world_ || out.size() != ExchangeFloats()) return;
  out[2 * rank] = static_cast<float>(samples_);
  out[2 * rank + 1] = static_cast<float>(busy_ms_);
}

absl::Status BatchBalancer::Update(absl::Span<const float> summed) {
  if (summed.size() != ExchangeFloats()) {
    return absl::InvalidArgumentError(absl::StrCat("balance figures: expected ", ExchangeFloats(),
                                                   " floats, got ", summed.size()));
  }
  for (float f : summed) {
    if (!std::isfinite(f) || f < 0) {
      return absl::InvalidArgumentError(absl::StrCat("balance figures: bad value ", f));
    }
  }
  samples_ = 0;
  busy_ms_ = 0;
  // The first measure of every worker sets the shares at once; later ones move them halfway.
  const bool first = std::all_of(speed_.begin(), speed_.end(), [](double s) { return s <= 0; });
  for (int r = 0; r < world_; ++r) {
    const double samples = summed[2 * r], busy = summed[2 * r + 1];
    if (samples <= 0 || busy <= 0) continue;
    const double speed = samples / busy;
    speed_[r] = speed_[r] > 0 ? (1 - kStep) * speed_[r] + kStep * speed : speed;
  }
  double speed_sum = 0;
  for (double s : speed_) {
    if (s <= 0) return absl::OkStatus();  // someone not measured yet: keep the shares
    speed_sum += s;
  }

  std::vector<double> want(world_);
  std::vector<int> next(world_);
  int sum = 0;
  for (int r = 0; r < world_; ++r) {
    const double step = first ? 1.0 : kStep;
    want[r] = (1 - step) * shares_[r] + step * total_ * speed_[r] / speed_sum;
    next[r] = std::max(1, static_cast<int>(std::floor(want[r])));
    sum += next[r];
  }
  // Largest remainders first; ties to the lower rank, so every worker rounds alike.
  while (sum < total_) {
    int best = 0;
    for (int r = 1; r < world_; ++r) {
      if (want[r] - next[r] > want[best] - next[best]) best = r;
    }
    ++next[best];
    ++sum;
  }
  while (sum > total_) {
    int best = -1;
    for (int r = 0; r < world_; ++r) {
      if (next[r] > 1 && (best < 0 || want[r] - next[r] < want[best] - next[best])) best = r;
    }
    --next[best];
    --sum;
  }
  shares_ = std::move(next);
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps
