#include "worker/tools/teacher_data.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/data/classifier_metrics.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/schema.h"
#include "xxhash.h"

namespace ps {
namespace worker {
namespace {

constexpr int kChunk = 4096;

uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A splitmix64 stream.
struct Rng {
  uint64_t state;
  uint64_t operator()() { return Mix(state += 0x9E3779B97F4A7C15ull); }
  double Uniform() { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// A standard normal from two uniforms of `bits` (Box-Muller).
double Normal(uint64_t a, uint64_t b) {
  const double u = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
  const double v = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TeacherData>> TeacherData::Create(
    const config::Job& job, const TeacherDataOptions& options) {
  if (!job.data().has_schema()) {
    return absl::InvalidArgumentError("the teacher writes data for a job with a data.schema");
  }
  if (options.cardinality < 1 || options.cardinality > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError("cardinality must be in [1, 2^40]");
  }
  if (!(options.emb_scale > 0) || !(options.logit_scale > 0)) {
    return absl::InvalidArgumentError("emb_scale and logit_scale must be > 0");
  }
  if (!(options.positive_rate > 0 && options.positive_rate < 1)) {
    return absl::InvalidArgumentError("positive_rate must be in (0, 1)");
  }
  PS_ASSIGN_OR_RETURN(SchemaOptions schema, SchemaOf(job));
  PS_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpec::FromJob(job));
  PS_ASSIGN_OR_RETURN(EmbeddingLayout layout, EmbeddingLayout::FromJob(job, spec));
  PS_ASSIGN_OR_RETURN(ZipfSampler zipf, ZipfSampler::Create(options.cardinality, options.zipf));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      CreateModel(spec, Mix(options.seed ^ 0x7eac4e7ull), Backend::kCpu));
  std::unique_ptr<TeacherData> data(new TeacherData(
      job, options, std::move(schema), std::move(spec), std::move(layout), zipf, std::move(model)));
  data->Calibrate();
  return data;
}

TeacherData::TeacherData(const config::Job& job, const TeacherDataOptions& options,
                         SchemaOptions schema, ModelSpec spec, EmbeddingLayout layout,
                         ZipfSampler zipf, std::unique_ptr<Model> model)
    : job_(job),
      options_(options),
      schema_(std::move(schema)),
      spec_(std::move(spec)),
      layout_(std::move(layout)),
      zipf_(zipf),
      model_(std::move(model)) {
  const TextSchema& text = *schema_.text;
  // Columns named by number keep their place; named ones take the next free places.
  std::vector<const ColumnRef*> refs = {&text.label};
  for (const DenseColumnSpec& d : text.dense) refs.push_back(&d.column);
  for (const SparseFieldSpec& f : text.sparse) refs.push_back(&f.column);
  for (const ColumnRef* r : refs) num_columns_ = std::max(num_columns_, r->index + 1);
  positions_.resize(refs.size());
  names_.clear();
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i]->index >= 0) {
      positions_[i] = refs[i]->index;
    } else {
      positions_[i] = num_columns_++;
    }
  }
  names_.resize(num_columns_);
  for (int c = 0; c < num_columns_; ++c) names_[c] = absl::StrCat("col", c + 1);
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i]->index < 0) names_[positions_[i]] = refs[i]->name;
  }
  Rng rng{Mix(options_.seed ^ 0xde45e)};
  for (size_t d = 0; d < text.dense.size(); ++d) {
    dense_means_.push_back(std::exp(rng.Uniform() * std::log(300.0)));  // log-uniform [1, 300]
  }
  header_ = absl::StrCat(absl::StrJoin(names_, std::string(1, text.delimiter)), "\n");
  std::string header_line = header_;
  header_line.pop_back();
  columns_ = *MapColumns(text, header_line);
}

void TeacherData::Cells(uint64_t stream, int64_t index, std::vector<std::string>* cells) {
  const TextSchema& text = *schema_.text;
  cells->assign(num_columns_, std::string());
  Rng rng{Mix(options_.seed * 0x9E3779B97F4A7C15ull ^ Mix(stream * 0x51ED27ull + index))};
  (*cells)[positions_[0]] = "0";  // the label comes with the teacher's probability
  for (size_t d = 0; d < text.dense.size(); ++d) {
    if (rng.Uniform() < 0.1) continue;
    const double p = 1.0 / (1.0 + dense_means_[d]);
    const double x = std::floor(std::log(1.0 - rng.Uniform()) / std::log(1.0 - p));
    (*cells)[positions_[1 + d]] = absl::StrCat(static_cast<int64_t>(x));
  }
  const auto value = [&](size_t f) {
    const uint64_t rank = zipf_.Draw(rng) - 1;
    // A bijection of the rank per field, written as hex.
    return absl::StrFormat("%x", Mix(rank ^ (uint64_t{f + 1} << 44) ^ options_.seed) >> 24);
  };
  for (size_t f = 0; f < text.sparse.size(); ++f) {
    const SparseFieldSpec& spec = text.sparse[f];
    std::string& cell = (*cells)[positions_[1 + text.dense.size() + f]];
    if (spec.separator == 0) {
      cell = value(f);
      continue;
    }
    const int count = 1 + static_cast<int>(rng.Uniform() * spec.max_values);
    for (int k = 0; k < count; ++k) {
      if (k > 0) cell.push_back(spec.separator);
      absl::StrAppend(&cell, value(f));
    }
  }
  uniforms_.push_back(rng.Uniform());
}

void TeacherData::Logits(int64_t count, std::vector<double>* logits) {
  // The teacher's rows: N(0, emb_scale^2) per float, a function of (seed, table, key).
  KeyDeduper dedup;
  std::vector<TableKeys> keys;
  GatherKeys(layout_, batch_, &dedup, &keys);
  std::vector<std::vector<float>> rows(keys.size());
  for (size_t g = 0; g < keys.size(); ++g) {
    const TableSlots& t = layout_.tables()[g];
    const uint64_t table_seed = XXH3_64bits_withSeed(t.table.data(), t.table.size(), options_.seed);
    const std::vector<uint64_t>& unique = keys[g].unique;
    rows[g].resize(unique.size() * t.dim);
    for (size_t k = 0; k < unique.size(); ++k) {
      for (int c = 0; c < t.dim; ++c) {
        const uint64_t h = Mix(unique[k] ^ table_seed ^ (uint64_t(c) << 52));
        rows[g][k * t.dim + c] = static_cast<float>(options_.emb_scale * Normal(h, Mix(h + 1)));
      }
    }
  }
  emb_.resize(size_t(count) * layout_.width());
  PoolRows(layout_, static_cast<int>(count), keys, rows, emb_.data());
  probs_.resize(count);
  model_->Predict(static_cast<int>(count), batch_.dense.data(), emb_.data(), probs_.data());
  logits->resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const double p = std::clamp<double>(probs_[i], 1e-7, 1 - 1e-7);
    (*logits)[i] = std::log(p / (1 - p));
  }
}

void TeacherData::Parse(const std::vector<std::vector<std::string>>& cells) {
  const TextSchema& text = *schema_.text;
  const int n = static_cast<int>(cells.size());
  batch_.size = n;
  batch_.labels.resize(n);
  batch_.dense.resize(size_t(n) * text.dense.size());
  batch_.keys.clear();
  batch_.offsets.assign(1, 0);
  std::vector<absl::string_view> scratch;
  std::string line;
  for (int i = 0; i < n; ++i) {
    line = absl::StrJoin(cells[i], std::string(1, text.delimiter));
    // The teacher's own lines always parse: they are written by the schema.
    const absl::Status parsed = ParseDelimitedLine(
        line, text, columns_, &scratch, &batch_.labels[i],
        batch_.dense.data() + i * text.dense.size(), &batch_.keys, &batch_.offsets);
    if (!parsed.ok()) {
      std::fprintf(stderr, "teacher_data: a line of its own fails to parse: %s\n",
                   std::string(parsed.message()).c_str());
      std::abort();
    }
  }
}

void TeacherData::Calibrate() {
  std::vector<double> all, logits;
  std::vector<std::vector<std::string>> cells;
  for (int64_t first = 0; first < kCalibrationRows; first += kChunk) {
    const int64_t count = std::min<int64_t>(kChunk, kCalibrationRows - first);
    cells.resize(count);
    uniforms_.clear();
    for (int64_t i = 0; i < count; ++i) Cells(kTrainStream, first + i, &cells[i]);
    Parse(cells);
    Logits(count, &logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  double mean = 0, var = 0;
  for (double l : all) mean += l;
  mean /= all.size();
  for (double l : all) var += (l - mean) * (l - mean);
  var /= all.size();
  center_ = mean;
  scale_ = var > 0 ? options_.logit_scale / std::sqrt(var) : 1.0;
  // The bias that gives a mean probability of positive_rate, by bisection.
  double lo = -30, hi = 30;
  for (int it = 0; it < 100; ++it) {
    const double mid = (lo + hi) / 2;
    double p = 0;
    for (double l : all) p += 1 / (1 + std::exp(-(scale_ * (l - center_) + mid)));
    (p / all.size() < options_.positive_rate ? lo : hi) = mid;
  }
  bias_ = (lo + hi) / 2;
}

void TeacherData::Draw(uint64_t stream, int64_t first, int count, std::string* text,
                       std::vector<float>* probs, std::vector<float>* labels) {
  std::vector<std::vector<std::string>> cells(count);
  uniforms_.clear();
  for (int i = 0; i < count; ++i) Cells(stream, first + i, &cells[i]);
  Parse(cells);
  std::vector<double> logits;
  Logits(count, &logits);
  const char delimiter = schema_.text->delimiter;
  for (int i = 0; i < count; ++i) {
    const double p = 1 / (1 + std::exp(-(scale_ * (logits[i] - center_) + bias_)));
    const bool positive = uniforms_[i] < p;
    probs->push_back(static_cast<float>(p));
    labels->push_back(positive ? 1.0f : 0.0f);
    cells[i][positions_[0]] = positive ? "1" : "0";
    absl::StrAppend(text, absl::StrJoin(cells[i], std::string(1, delimiter)), "\n");
  }
}

absl::StatusOr<TeacherFileStats> TeacherData::Write(uint64_t stream, int64_t rows,
                                                    const std::string& path) {
  if (rows < 0) return absl::InvalidArgumentError("rows must be >= 0");
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  std::string text;
  std::vector<float> probs, labels;
  if (schema_.text->header) text = header_;
  for (int64_t first = 0; first < rows; first += kChunk) {
    const int count = static_cast<int>(std::min<int64_t>(kChunk, rows - first));
    Draw(stream, first, count, &text, &probs, &labels);
    if (std::fwrite(text.data(), 1, text.size(), out) != text.size()) {
      std::fclose(out);
      return absl::UnavailableError(absl::StrCat(path, ": write failed"));
    }
    text.clear();
  }
  if (std::fclose(out) != 0) return absl::UnavailableError(absl::StrCat(path, ": close failed"));
  TeacherFileStats stats;
  stats.rows = rows;
  for (float l : labels) stats.positives += l > 0 ? 1 : 0;
  if (rows > 0) {
    stats.teacher_auc = Auc(probs, labels);
    stats.teacher_logloss = LogLoss(probs, labels);
  }
  return stats;
}

}  // namespace worker
}  // namespace ps
