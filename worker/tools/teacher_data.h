// Synthetic training data for any job's schema, labelled by a teacher of the job's own model
// family: ps_datagen --job. The teacher is the job's model (DLRM, WIDE_DEEP, DEEPFM or DCN_V2,
// with its shapes and pooling) with random parameters, and random embedding rows that are a
// function of (seed, table, key), so that a student of the same family can represent it exactly
// and a trained model's held-out AUC can be compared with the best achievable, the teacher's own.
//
// A line holds the schema's columns (with its delimiter, and its header line first when it has
// one; columns the schema does not read are left empty):
//   - the label: 1 with the teacher's probability;
//   - each dense column: empty with probability 0.1, else a geometric integer with mean mu_d
//     (log-uniform in [1, 300] by the seed), which the job's transform then reads;
//   - each single-valued sparse field: a Zipf(zipf) rank over `cardinality` values, written as
//     the hex of a per-field bijection of the rank (so the text is not ordered by frequency);
//   - each multi-valued field: 1 to max_values such values (uniformly many), joined by its
//     separator.
// The teacher's logit is the model's, standardised over the first kCalibrationRows rows of the
// training stream to a standard deviation of `logit_scale`, plus the bias that gives a mean
// probability of `positive_rate`.
//
// Every sample is a pure function of (seed, stream, index): files are reproducible bit for bit.
#ifndef PS_WORKER_TOOLS_TEACHER_DATA_H_
#define PS_WORKER_TOOLS_TEACHER_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/zipf_sampler.h"
#include "worker/embedding_io.h"
#include "worker/model/model.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace worker {

struct TeacherDataOptions {
  // Distinct values of every sparse field; default 1000, in [1, 2^40].
  int64_t cardinality = 1000;
  // The Zipf exponent of the values (>= 0); default 1.1.
  double zipf = 1.1;
  // The standard deviation of the teacher's embedding weights (> 0); default 0.5.
  double emb_scale = 0.5;
  // The standard deviation of the teacher's logit before its bias (> 0); default 1.5.
  double logit_scale = 1.5;
  // The teacher's mean probability of a positive label, in (0, 1); default 0.3.
  double positive_rate = 0.3;
  // Seeds the teacher and the samples; default 1.
  uint64_t seed = 1;
};

// What TeacherData::Write wrote.
struct TeacherFileStats {
  int64_t rows = 0;
  int64_t positives = 0;
  double teacher_auc = 0.5;
  double teacher_logloss = 0;
};

// A TeacherData is a job's teacher model and the distribution of its inputs. Thread-compatible.
class TeacherData {
 public:
  static constexpr uint64_t kTrainStream = 0;
  static constexpr uint64_t kHeldoutStream = 1;
  static constexpr int64_t kCalibrationRows = 20000;

  // The teacher of `job` (a DELIMITED job with data.schema, validated). INVALID_ARGUMENT for
  // options out of range or a job without a schema; the model's errors (ModelSpec::FromJob,
  // CreateModel) otherwise.
  static absl::StatusOr<std::unique_ptr<TeacherData>> Create(const config::Job& job,
                                                             const TeacherDataOptions& options);

  // Writes samples [0, rows) of `stream` to `path` (replacing it) and returns their statistics,
  // the AUC exact. INVALID_ARGUMENT for rows < 0; NOT_FOUND, PERMISSION_DENIED or UNAVAILABLE
  // (naming the path) when the file cannot be written.
  absl::StatusOr<TeacherFileStats> Write(uint64_t stream, int64_t rows, const std::string& path);

  // Draws `count` samples of `stream` from `first` as lines (with their "\n") appended to
  // `*text`, and appends their teacher probabilities to `*probs` and labels to `*labels`.
  void Draw(uint64_t stream, int64_t first, int count, std::string* text, std::vector<float>* probs,
            std::vector<float>* labels);

  // The header line the files start with (with its "\n") when the schema has one.
  const std::string& header() const { return header_; }

 private:
  TeacherData(const config::Job& job, const TeacherDataOptions& options, SchemaOptions schema,
              ModelSpec spec, EmbeddingLayout layout, ZipfSampler zipf,
              std::unique_ptr<Model> model);

  // The columns of sample `index` of `stream` (the label "0" for now), and the uniform that
  // decides its label appended to uniforms_.
  void Cells(uint64_t stream, int64_t index, std::vector<std::string>* cells);
  // Parses the samples' lines into batch_, as a worker's reader would.
  void Parse(const std::vector<std::vector<std::string>>& cells);
  // The teacher's raw logits of the `count` samples in batch_.
  void Logits(int64_t count, std::vector<double>* logits);
  // Calibrates scale_ and bias_ on the first kCalibrationRows training rows.
  void Calibrate();

  const config::Job job_;
  const TeacherDataOptions options_;
  const SchemaOptions schema_;
  const ModelSpec spec_;
  const EmbeddingLayout layout_;
  const ZipfSampler zipf_;
  const std::unique_ptr<Model> model_;
  std::vector<double> dense_means_;  // mu_d
  int num_columns_ = 0;
  // Where the label, each dense column and each field go in a line, the columns' names, the
  // header line and the column map of the lines written.
  std::vector<int> positions_;
  std::vector<std::string> names_;
  std::string header_;
  ColumnMap columns_;
  double center_ = 0;
  double scale_ = 1;
  double bias_ = 0;
  // Workspace of one Draw.
  Batch batch_;
  std::vector<double> uniforms_;  // per sample: decides the label
  std::vector<float> emb_;
  std::vector<float> probs_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_TOOLS_TEACHER_DATA_H_
