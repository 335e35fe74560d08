#include "worker/data/classifier_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ps {
namespace worker {

namespace {

// A total order on scores: NaN below everything.
float SortKey(float score) {
  return std::isnan(score) ? -std::numeric_limits<float>::infinity() : score;
}

bool IsPositive(float label) { return label > 0.5f; }

}  // namespace

double Auc(absl::Span<const float> scores, absl::Span<const float> labels) {
  if (scores.size() != labels.size()) return std::numeric_limits<double>::quiet_NaN();
  const size_t n = scores.size();
  std::vector<std::pair<float, bool>> pairs(n);
  for (size_t i = 0; i < n; ++i) pairs[i] = {SortKey(scores[i]), IsPositive(labels[i])};
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Walk groups of equal scores from the lowest: each positive beats every negative below its
  // group and ties with the negatives in it.
  double wins = 0;  // in half-pairs, exact up to 2^53
  uint64_t negatives_below = 0;
  uint64_t positives = 0;
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    uint64_t group_positives = 0;
    while (end < n && pairs[end].first == pairs[begin].first) {
      group_positives += pairs[end].second ? 1 : 0;
      ++end;
    }
    const uint64_t group_negatives = (end - begin) - group_positives;
    wins += static_cast<double>(group_positives) *
            (2.0 * static_cast<double>(negatives_below) + static_cast<double>(group_negatives));
    negatives_below += group_negatives;
    positives += group_positives;
    begin = end;
  }
  if (positives == 0 || negatives_below == 0) return 0.5;
  return wins / (2.0 * static_cast<double>(positives) * static_cast<double>(negatives_below));
}

double LogLoss(absl::Span<const float> probabilities, absl::Span<const float> labels) {
  if (probabilities.size() != labels.size()) return std::numeric_limits<double>::quiet_NaN();
  if (probabilities.empty()) return 0.0;
  constexpr double kEpsilon = 1e-7;
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    double p = probabilities[i];
    p = std::isnan(p) ? kEpsilon : std::min(std::max(p, kEpsilon), 1.0 - kEpsilon);
    const double y = labels[i];
    sum -= y * std::log(p) + (1.0 - y) * std::log(1.0 - p);
  }
  return sum / static_cast<double>(probabilities.size());
}

StreamingAuc::StreamingAuc() : positive_counts_(kNumBuckets, 0), negative_counts_(kNumBuckets, 0) {}

int StreamingAuc::BucketOf(float score) {
  if (!(score > 0.0f)) return 0;  // NaN too
  if (score >= 1.0f) return kNumBuckets - 1;
  return std::min(static_cast<int>(score * static_cast<float>(kNumBuckets)), kNumBuckets - 1);
}

void StreamingAuc::Add(float score, float label) {
  if (IsPositive(label)) {
    ++positive_counts_[BucketOf(score)];
    ++positives_;
  } else {
    ++negative_counts_[BucketOf(score)];
    ++negatives_;
  }
}

void StreamingAuc::Add(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = std::min(scores.size(), labels.size());
  for (size_t i = 0; i < n; ++i) Add(scores[i], labels[i]);
}

void StreamingAuc::Merge(const StreamingAuc& other) {
  for (int b = 0; b < kNumBuckets; ++b) {
    positive_counts_[b] += other.positive_counts_[b];
    negative_counts_[b] += other.negative_counts_[b];
  }
  positives_ += other.positives_;
  negatives_ += other.negatives_;
}

void StreamingAuc::Reset() {
  std::fill(positive_counts_.begin(), positive_counts_.end(), 0);
  std::fill(negative_counts_.begin(), negative_counts_.end(), 0);
  positives_ = 0;
  negatives_ = 0;
}

double StreamingAuc::Auc() const {
  if (positives_ == 0 || negatives_ == 0) return 0.5;
  double wins = 0;  // in half-pairs
  double negatives_below = 0;
  for (int b = 0; b < kNumBuckets; ++b) {
    const double p = static_cast<double>(positive_counts_[b]);
    const double q = static_cast<double>(negative_counts_[b]);
    wins += p * (2.0 * negatives_below + q);
    negatives_below += q;
  }
  return wins / (2.0 * static_cast<double>(positives_) * static_cast<double>(negatives_));
}

}  // namespace worker
}  // namespace ps
