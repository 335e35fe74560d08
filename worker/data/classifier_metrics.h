// Evaluation metrics for binary classifiers: exact AUC and log loss over a set of predictions, and
// a streaming AUC of bounded memory for progress lines.
//
// Labels are positive when > 0.5. Scores may be any floats for the AUCs (only their order
// matters; NaN sorts below every number); LogLoss expects probabilities.
#ifndef PS_WORKER_DATA_CLASSIFIER_METRICS_H_
#define PS_WORKER_DATA_CLASSIFIER_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace ps {
namespace worker {

// The area under the ROC curve: the probability that a random positive scores above a random
// negative, a tie counting one half. Exact, in O(n log n). Returns 0.5 when there are no
// positives or no negatives (empty input included), and NaN when the spans' sizes differ.
double Auc(absl::Span<const float> scores, absl::Span<const float> labels);

// The mean binary cross-entropy -[y log p + (1 - y) log(1 - p)] of probabilities p against labels
// y (soft labels in [0, 1] allowed), with p clipped to [1e-7, 1 - 1e-7] (NaN counts as 1e-7).
// Returns 0 for empty input and NaN when the spans' sizes differ.
double LogLoss(absl::Span<const float> probabilities, absl::Span<const float> labels);

// A StreamingAuc accumulates (score, label) pairs into 65536 equal-width buckets over [0, 1]
// (scores outside are clamped; NaN goes to the lowest bucket) and gives the AUC as if every score
// were its bucket's: ties within a bucket count one half, so the result differs from Auc() only by
// pairs whose scores are within 1/65536 of each other. Memory is fixed (1 MiB). Thread-compatible.
class StreamingAuc {
 public:
  static constexpr int kNumBuckets = 65536;

  StreamingAuc();

  void Add(float score, float label);
  // Adds every pair; the spans must have the same size (extra elements of the longer are ignored).
  void Add(absl::Span<const float> scores, absl::Span<const float> labels);
  // Adds the pairs counted by `other` (e.g. another thread's or worker's).
  void Merge(const StreamingAuc& other);
  void Reset();

  // The AUC of the pairs added since construction or Reset(); 0.5 without both classes.
  double Auc() const;
  int64_t positives() const { return positives_; }
  int64_t negatives() const { return negatives_; }

 private:
  static int BucketOf(float score);

  std::vector<uint64_t> positive_counts_;  // kNumBuckets
  std::vector<uint64_t> negative_counts_;  // kNumBuckets
  int64_t positives_ = 0;
  int64_t negatives_ = 0;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_CLASSIFIER_METRICS_H_
