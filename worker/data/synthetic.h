// Synthetic training data in Criteo's format, drawn from a known "teacher" model, so that a trained
// model's accuracy can be compared with the best achievable (the teacher's own).
//
// A sample has `num_dense` integer features and `num_sparse` categorical fields:
//   - categorical field f takes a value v in [0, C_f) with probability proportional to
//     (v + 1)^-zipf (Zipf's law: v is the value's frequency rank), written as the 8 hex digits of
//     Code(f, v), a per-field bijection of the 32-bit integers, so the text is not ordered by
//     frequency and the same rank means different text in different fields;
//   - integer feature d is empty with probability m_d, otherwise geometric with mean mu_d
//     (m_d uniform in [0, 0.3] and mu_d log-uniform in [1, 300], both fixed by the seed);
//   - the teacher's logit is bias + sum_f w_f(v_f) + sum_d u_d * log(1 + x_d) (an empty x_d counts
//     0), with w_f(v) ~ N(0, teacher_scale^2) and u_d ~ N(0, dense_scale^2) fixed by the seed
//     through a hash (so they need no storage), and the bias set by the seed to give a mean
//     probability of `positive_rate`; the label is 1 with probability sigmoid(logit).
// The log(1 + x) matches CriteoReader's transform, so a model can represent the teacher exactly.
//
// Why the defaults (cardinality 10000, zipf 1.1, teacher_scale 0.2, dense_scale 0.25): they make
// a teacher that a learner can approach from about 1M rows, with the embeddings still carrying a
// large part of the signal. The logit's variance is about 26 * 0.2^2 = 1.0 from the fields and 1.4
// from the dense part (teacher AUC about 0.82). With Zipf(1.1) over 10000 values, 85% of a field's
// draws are of its 1000 most frequent values, each seen at least about 75 times in 1M rows; the
// rarely seen values, whose weights no learner can estimate, carry little of the variance: zeroing
// the weights of every value seen fewer than 20 times in 1M rows lowers the teacher's AUC by only
// 0.005. Measured with seed 1: teacher AUC 0.818; a one-pass AdaGrad logistic regression on 1M
// rows, 0.797. A larger teacher_scale or cardinality makes the data harder to learn.
//
// Long-tail mode (`long_tail`) models a click log's ids, most of them seen once: field f's values
// are ranks in [0, C_f) with C_f up to 2^40 (e.g. 10^8), drawn by a ZipfSampler (O(1) memory and
// time per draw, however large C_f), and written as the 16 hex digits of LongTailCode(f, v), a
// per-field bijection of the 64-bit integers, so ids spread over the whole key space. The teacher
// is the same: w_f(v) comes from a hash of (seed, f, v) and is never stored, so the teacher's AUC
// is about as above (0.82 with the default scales), computed from the true probabilities as
// always. What changes is what a learner can reach: with Zipf(1.05) over 10^8 values, 1M rows
// hold about 317000 distinct values of a field, 86% of them seen once, and 43% of the field's
// draws are of values seen fewer than 20 times, whose weights no learner can estimate well.
// Measured with seed 1: teacher AUC 0.822 on 100000 held-out rows; 1M rows of 26 fields take
// about 5 s of CPU (-c opt; 0.19 us an id, the text included).
//
// Every sample is a pure function of (seed, stream, index), so files are reproducible bit for bit,
// a held-out stream is independent of the training stream's length, and rows can be drawn in any
// order or in parallel.
#ifndef PS_WORKER_DATA_SYNTHETIC_H_
#define PS_WORKER_DATA_SYNTHETIC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/zipf_sampler.h"

namespace ps {
namespace worker {

struct SyntheticOptions {
  // Integer features per sample; default 13, in [0, 1000].
  int num_dense = 13;
  // Categorical fields per sample; default 26, in [0, 1000].
  int num_sparse = 26;
  // Long-tail mode (see above): values drawn without tables, written as 64-bit codes. Default
  // false.
  bool long_tail = false;
  // The number of distinct values of each field: one number for every field, or one per field.
  // Default 10000; each in [1, 2^24] (sampling keeps an 8-byte table entry per value of each
  // distinct cardinality), or in [1, 2^40] with long_tail (no tables).
  std::vector<int64_t> cardinalities = {10000};
  // The Zipf exponent s of the values' distribution; default 1.1 (ps_datagen --long_tail uses
  // 1.05), >= 0 (0 is uniform).
  double zipf = 1.1;
  // The standard deviation of the categorical weights w_f(v); default 0.2, >= 0.
  double teacher_scale = 0.2;
  // The standard deviation of the dense weights u_d; default 0.25, >= 0.
  double dense_scale = 0.25;
  // The teacher's mean probability of a positive label, which fixes the bias; default 0.3, in
  // (0, 1).
  double positive_rate = 0.3;
  // Seeds everything: distributions, weights, samples. Default 1.
  uint64_t seed = 1;
};

// One drawn sample, before it is written as text.
struct SyntheticSample {
  float label = 0;           // 0 or 1
  double logit = 0;          // the teacher's
  double probability = 0.5;  // sigmoid(logit)
  // num_dense integers, -1 where the feature is empty.
  std::vector<int64_t> dense;
  // num_sparse frequency ranks, 0 the most frequent; Code() (LongTailCode() in long-tail mode)
  // gives the text.
  std::vector<uint64_t> values;
};

// A SyntheticData is a teacher model and the distribution of its inputs. Immutable after
// Create(): thread-safe.
class SyntheticData {
 public:
  // The streams of samples the datagen tool writes; any other number is another independent one.
  static constexpr uint64_t kTrainStream = 0;
  static constexpr uint64_t kHeldoutStream = 1;

  // Returns the model of `options`, or INVALID_ARGUMENT naming the option out of range.
  static absl::StatusOr<std::unique_ptr<SyntheticData>> Create(SyntheticOptions options);

  ~SyntheticData();
  SyntheticData(const SyntheticData&) = delete;
  SyntheticData& operator=(const SyntheticData&) = delete;

  // Draws sample `index` of `stream` into `*sample` (its vectors are resized).
  void Draw(uint64_t stream, uint64_t index, SyntheticSample* sample) const;

  // Appends `sample` to `*out` as one line of Criteo text, with its "\n".
  void AppendLine(const SyntheticSample& sample, std::string* out) const;

  // The 32-bit code of rank `value` in field `field`, written as 8 lowercase hex digits.
  uint32_t Code(int field, uint32_t value) const;
  // In long-tail mode, the 64-bit code of rank `value` in field `field`, written as 16 lowercase
  // hex digits.
  uint64_t LongTailCode(int field, uint64_t value) const;
  // The teacher's weight w_f(value) of rank `value` in field `field`.
  double Weight(int field, uint64_t value) const;
  // The teacher's weight u_d of integer feature `d`.
  double DenseWeight(int d) const { return dense_weights_[d]; }
  double bias() const { return bias_; }
  // The probability of rank `value` in field `field` (0 outside [0, C_f)).
  double ValueProbability(int field, uint64_t value) const;
  // The expected number of distinct values of field `field` in `rows` samples (rows >= 0): exact
  // over the tabulated values, within about 1e-6 relative in long-tail mode.
  double ExpectedDistinct(int field, int64_t rows) const;

  const SyntheticOptions& options() const { return options_; }

 private:
  struct Field;
  struct AliasTable;

  explicit SyntheticData(SyntheticOptions options);
  // Draws the features of a sample and returns its logit without the bias; `*label_uniform` is
  // the uniform in [0, 1) that decides its label.
  double DrawUnbiased(uint64_t stream, uint64_t index, SyntheticSample* sample,
                      double* label_uniform) const;

  // Constant after construction.
  const SyntheticOptions options_;
  std::vector<std::unique_ptr<AliasTable>> tables_;  // one per distinct cardinality
  std::vector<Field> fields_;                        // num_sparse
  std::vector<double> dense_weights_;                // num_dense
  std::vector<double> missing_rates_;                // num_dense
  std::vector<double> log_continue_;                 // num_dense: log(1 - p) of the geometric
  double bias_ = 0;
};

// What WriteSyntheticFile wrote.
struct SyntheticFileStats {
  int64_t rows = 0;
  int64_t positives = 0;
  // The mean of the teacher's probabilities.
  double mean_probability = 0;
  // The teacher's log loss and AUC against the drawn labels (exact, or from a StreamingAuc).
  double teacher_logloss = 0;
  double teacher_auc = 0.5;
};

// Writes samples [0, rows) of `stream` to `path` (replacing it) as Criteo text, and returns their
// statistics. With `exact_auc` the AUC is exact and costs 8 bytes of memory per row; otherwise it
// comes from a StreamingAuc (within about 1e-4). Errors: INVALID_ARGUMENT for rows < 0;
// NOT_FOUND, PERMISSION_DENIED or UNAVAILABLE (naming the path) when the file cannot be written.
absl::StatusOr<SyntheticFileStats> WriteSyntheticFile(const SyntheticData& data, uint64_t stream,
                                                      int64_t rows, const std::string& path,
                                                      bool exact_auc);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_SYNTHETIC_H_
