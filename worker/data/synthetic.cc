#include "worker/data/synthetic.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "worker/data/classifier_metrics.h"

namespace ps {
namespace worker {

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
// The stream whose samples set the bias; users' streams are small numbers.
constexpr uint64_t kCalibrationStream = 0xb1a5ca11b7a7e000ull;
constexpr int kCalibrationRows = 1 << 16;
// Weights of fields with at most this many values are tabulated (4 bytes each).
constexpr int64_t kMaxTabulatedValues = int64_t{1} << 20;
constexpr int64_t kMaxCardinality = int64_t{1} << 24;
constexpr int64_t kMaxLongTailCardinality = int64_t{1} << 40;
constexpr int kMaxFeatures = 1000;
// Integer features are capped here (a geometric draw of u near 0 is unbounded).
constexpr double kMaxInteger = 1e12;
// Mean and missing rate ranges of the integer features.
constexpr double kMinDenseMean = 1.0;
constexpr double kMaxDenseMean = 300.0;
constexpr double kMaxMissingRate = 0.3;
// The written file is flushed in pieces of about this size.
constexpr size_t kWriteChunkBytes = 1 << 20;

// SplitMix64's finaliser: a bijective 64-bit mixer.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) from the top 53 bits.
inline double Uniform(uint64_t r) { return static_cast<double>(r >> 11) * 0x1.0p-53; }
// Uniform in (0, 1].
inline double UniformOpenZero(uint64_t r) { return static_cast<double>((r >> 11) + 1) * 0x1.0p-53; }

// A standard normal deviate that is a pure function of `h` (Box-Muller).
double NormalOfHash(uint64_t h) {
  const double u1 = UniformOpenZero(Mix64(h ^ 0x6e6f726d616c3161ull));
  const double u2 = Uniform(Mix64(h ^ 0x6e6f726d616c3262ull));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

inline double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// A key derived from the seed for purpose `what` and index `i`.
inline uint64_t DerivedKey(uint64_t seed, uint64_t what, uint64_t i) {
  return Mix64(Mix64(seed ^ what) + i * kGolden);
}

constexpr uint64_t kWhatField = 0x6669656c64ull;     // "field"
constexpr uint64_t kWhatDense = 0x64656e7365ull;     // "dense"
constexpr uint64_t kWhatStream = 0x73747265616dull;  // "stream"

// Appends the decimal digits of x >= 0.
void AppendInt(int64_t x, std::string* out) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + x % 10);
    x /= 10;
  } while (x > 0);
  while (n > 0) out->push_back(digits[--n]);
}

absl::Status ErrnoStatus(int err, const std::string& path, absl::string_view what) {
  const std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

// Vose's alias method for Zipf(s) over [0, n): O(1) per draw from one 64-bit random number.
struct SyntheticData::AliasTable {
  struct Entry {
    uint32_t threshold;  // keep the bucket's own value if the fraction's top 32 bits are below
    uint32_t alias;
  };

  AliasTable(int64_t n, double s) : cardinality(n), entries(n) {
    std::vector<double> scaled(n);
    normalizer = 0;
    for (int64_t k = 0; k < n; ++k) normalizer += std::pow(static_cast<double>(k + 1), -s);
    for (int64_t k = 0; k < n; ++k) {
      scaled[k] = std::pow(static_cast<double>(k + 1), -s) / normalizer * static_cast<double>(n);
    }
    std::vector<uint32_t> small, large;
    for (int64_t k = n - 1; k >= 0; --k) (scaled[k] < 1.0 ? small : large).push_back(k);
    for (int64_t k = 0; k < n; ++k) entries[k] = {0xffffffffu, static_cast<uint32_t>(k)};
    while (!small.empty() && !large.empty()) {
      const uint32_t s_k = small.back();
      small.pop_back();
      const uint32_t l_k = large.back();
      entries[s_k].threshold =
          static_cast<uint32_t>(std::min(scaled[s_k] * 4294967296.0, 4294967295.0));
      entries[s_k].alias = l_k;
      scaled[l_k] -= 1.0 - scaled[s_k];
      if (scaled[l_k] < 1.0) {
        large.pop_back();
        small.push_back(l_k);
      }
    }
    // What is left has probability 1 up to rounding: keeps its own value (threshold max).
  }

  uint32_t Draw(uint64_t r) const {
    const absl::uint128 product = absl::uint128(r) * absl::uint128(cardinality);
    const uint64_t bucket = absl::Uint128High64(product);
    const uint32_t fraction = static_cast<uint32_t>(absl::Uint128Low64(product) >> 32);
    const Entry& e = entries[bucket];
    return fraction < e.threshold ? static_cast<uint32_t>(bucket) : e.alias;
  }

  const uint64_t cardinality;
  std::vector<Entry> entries;
  double normalizer;  // sum of (k + 1)^-s
};

struct SyntheticData::Field {
  const AliasTable* table;             // null in long-tail mode
  std::optional<ZipfSampler> sampler;  // in long-tail mode
  uint64_t weight_key;
  uint64_t long_tail_code_key;
  uint32_t code_key_a;
  uint32_t code_key_b;
  std::vector<float> weights;  // Weight() of every value, if tabulated
};

absl::StatusOr<std::unique_ptr<SyntheticData>> SyntheticData::Create(SyntheticOptions options) {
  const auto invalid = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic data: ", parts...));
  };
  if (options.num_dense < 0 || options.num_dense > kMaxFeatures) {
    return invalid("num_dense must be in [0, ", kMaxFeatures, "], got ", options.num_dense);
  }
  if (options.num_sparse < 0 || options.num_sparse > kMaxFeatures) {
    return invalid("num_sparse must be in [0, ", kMaxFeatures, "], got ", options.num_sparse);
  }
  if (options.cardinalities.size() != 1 &&
      options.cardinalities.size() != static_cast<size_t>(options.num_sparse)) {
    return invalid("cardinalities must have 1 or num_sparse (", options.num_sparse,
                   ") values, got ", options.cardinalities.size());
  }
  const int64_t max_cardinality = options.long_tail ? kMaxLongTailCardinality : kMaxCardinality;
  for (const int64_t c : options.cardinalities) {
    if (c < 1 || c > max_cardinality) {
      return invalid("cardinalities must be in [1, ", max_cardinality, "]",
                     options.long_tail ? " in long-tail mode" : " (2^40 in long-tail mode)",
                     ", got ", c);
    }
  }
  if (!std::isfinite(options.zipf) || options.zipf < 0) {
    return invalid("zipf must be finite and >= 0, got ", options.zipf);
  }
  if (!std::isfinite(options.teacher_scale) || options.teacher_scale < 0) {
    return invalid("teacher_scale must be finite and >= 0, got ", options.teacher_scale);
  }
  if (!std::isfinite(options.dense_scale) || options.dense_scale < 0) {
    return invalid("dense_scale must be finite and >= 0, got ", options.dense_scale);
  }
  if (!(options.positive_rate > 0 && options.positive_rate < 1)) {
    return invalid("positive_rate must be in (0, 1), got ", options.positive_rate);
  }
  if (options.cardinalities.size() == 1) {
    options.cardinalities.assign(options.num_sparse, options.cardinalities[0]);
  }
  return std::unique_ptr<SyntheticData>(new SyntheticData(std::move(options)));
}

SyntheticData::SyntheticData(SyntheticOptions options) : options_(std::move(options)) {
  const uint64_t seed = options_.seed;
  std::map<int64_t, const AliasTable*> table_of;
  fields_.resize(options_.num_sparse);
  for (int f = 0; f < options_.num_sparse; ++f) {
    const int64_t c = options_.cardinalities[f];
    Field& field = fields_[f];
    if (options_.long_tail) {
      // Create() checked both arguments.
      field.table = nullptr;
      field.sampler = *ZipfSampler::Create(c, options_.zipf);
    } else {
      const AliasTable*& table = table_of[c];
      if (table == nullptr) {
        tables_.push_back(std::make_unique<AliasTable>(c, options_.zipf));
        table = tables_.back().get();
      }
      field.table = table;
    }
    const uint64_t key = DerivedKey(seed, kWhatField, f);
    field.weight_key = Mix64(key ^ 0x77656967687473ull);
    field.long_tail_code_key = Mix64(key ^ 0x636f64653634ull);  // "code64"
    field.code_key_a = static_cast<uint32_t>(key);
    field.code_key_b = static_cast<uint32_t>(key >> 32);
    if (!options_.long_tail && c <= kMaxTabulatedValues) {
      field.weights.resize(c);
      for (int64_t v = 0; v < c; ++v) field.weights[v] = static_cast<float>(Weight(f, v));
    }
  }
  for (int d = 0; d < options_.num_dense; ++d) {
    const uint64_t key = DerivedKey(seed, kWhatDense, d);
    dense_weights_.push_back(options_.dense_scale * NormalOfHash(key));
    missing_rates_.push_back(kMaxMissingRate * Uniform(Mix64(key ^ 1)));
    const double mean =
        kMinDenseMean * std::exp(std::log(kMaxDenseMean / kMinDenseMean) * Uniform(Mix64(key ^ 2)));
    log_continue_.push_back(std::log(mean / (1.0 + mean)));  // P(stop) = 1 / (1 + mean)
  }

  // The bias: bisection for the mean probability over a calibration stream.
  std::vector<double> logits(kCalibrationRows);
  SyntheticSample sample;
  double unused;
  for (int i = 0; i < kCalibrationRows; ++i) {
    logits[i] = DrawUnbiased(kCalibrationStream, i, &sample, &unused);
  }
  double low = -60, high = 60;
  for (int iteration = 0; iteration < 64; ++iteration) {
    const double mid = 0.5 * (low + high);
    double sum = 0;
    for (const double z : logits) sum += Sigmoid(mid + z);
    (sum / kCalibrationRows < options_.positive_rate ? low : high) = mid;
  }
  bias_ = 0.5 * (low + high);
}

SyntheticData::~SyntheticData() = default;

uint32_t SyntheticData::Code(int field, uint32_t value) const {
  // Each step is a bijection of the 32-bit integers: xor or add of a constant, multiplication by
  // an odd number, xor with a right shift of itself.
  uint32_t x = value ^ fields_[field].code_key_a;
  x *= 0x9e3779b1u;
  x ^= x >> 15;
  x += fields_[field].code_key_b;
  x *= 0x85ebca77u;
  x ^= x >> 13;
  x *= 0xc2b2ae3du;
  x ^= x >> 16;
  return x;
}

uint64_t SyntheticData::LongTailCode(int field, uint64_t value) const {
  // Adding a constant and Mix64 are bijections of the 64-bit integers.
  return Mix64(value + fields_[field].long_tail_code_key);
}

double SyntheticData::Weight(int field, uint64_t value) const {
  return options_.teacher_scale * NormalOfHash(fields_[field].weight_key + value * kGolden);
}

double SyntheticData::ValueProbability(int field, uint64_t value) const {
  const Field& f = fields_[field];
  if (f.sampler) return value < f.sampler->n() ? f.sampler->Probability(value + 1) : 0;
  const AliasTable& table = *f.table;
  if (value >= table.cardinality) return 0;
  return std::pow(static_cast<double>(value) + 1, -options_.zipf) / table.normalizer;
}

double SyntheticData::ExpectedDistinct(int field, int64_t rows) const {
  const Field& f = fields_[field];
  if (f.sampler) return f.sampler->ExpectedDistinct(static_cast<double>(rows));
  if (rows <= 0) return 0;
  double distinct = 0;
  for (uint64_t v = 0; v < f.table->cardinality; ++v) {
    distinct += -std::expm1(static_cast<double>(rows) * std::log1p(-ValueProbability(field, v)));
  }
  return distinct;
}

double SyntheticData::DrawUnbiased(uint64_t stream, uint64_t index, SyntheticSample* sample,
                                   double* label_uniform) const {
  // SplitMix64 from a state that is a pure function of (seed, stream, index).
  uint64_t state = Mix64(DerivedKey(options_.seed, kWhatStream, stream) + index * kGolden);
  const auto next = [&state] {
    state += kGolden;
    return Mix64(state);
  };
  sample->dense.resize(options_.num_dense);
  sample->values.resize(options_.num_sparse);
  double logit = 0;
  for (int d = 0; d < options_.num_dense; ++d) {
    const double missing = Uniform(next());
    const double u = UniformOpenZero(next());
    if (missing < missing_rates_[d]) {
      sample->dense[d] = -1;
      continue;
    }
    const double x = std::min(std::floor(std::log(u) / log_continue_[d]), kMaxInteger);
    sample->dense[d] = static_cast<int64_t>(x);
    logit += dense_weights_[d] * std::log1p(x);
  }
  for (int f = 0; f < options_.num_sparse; ++f) {
    const Field& field = fields_[f];
    if (field.sampler) {
      const uint64_t v = field.sampler->Draw(next) - 1;
      sample->values[f] = v;
      logit += Weight(f, v);
      continue;
    }
    const uint32_t v = field.table->Draw(next());
    sample->values[f] = v;
    logit += field.weights.empty() ? Weight(f, v) : field.weights[v];
  }
  *label_uniform = Uniform(next());
  return logit;
}

void SyntheticData::Draw(uint64_t stream, uint64_t index, SyntheticSample* sample) const {
  double label_uniform;
  const double logit = bias_ + DrawUnbiased(stream, index, sample, &label_uniform);
  sample->logit = logit;
  sample->probability = Sigmoid(logit);
  sample->label = label_uniform < sample->probability ? 1.0f : 0.0f;
}

void SyntheticData::AppendLine(const SyntheticSample& sample, std::string* out) const {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back(sample.label > 0.5f ? '1' : '0');
  for (const int64_t x : sample.dense) {
    out->push_back('\t');
    if (x >= 0) AppendInt(x, out);
  }
  if (options_.long_tail) {
    for (int f = 0; f < options_.num_sparse; ++f) {
      const uint64_t code = LongTailCode(f, sample.values[f]);
      char text[17];
      text[0] = '\t';
      for (int i = 0; i < 16; ++i) text[1 + i] = kHex[(code >> (60 - 4 * i)) & 0xf];
      out->append(text, sizeof(text));
    }
    out->push_back('\n');
    return;
  }
  for (int f = 0; f < options_.num_sparse; ++f) {
    const uint32_t code = Code(f, static_cast<uint32_t>(sample.values[f]));
    char text[9];
    text[0] = '\t';
    for (int i = 0; i < 8; ++i) text[1 + i] = kHex[(code >> (28 - 4 * i)) & 0xf];
    out->append(text, sizeof(text));
  }
  out->push_back('\n');
}

absl::StatusOr<SyntheticFileStats> WriteSyntheticFile(const SyntheticData& data, uint64_t stream,
                                                      int64_t rows, const std::string& path,
                                                      bool exact_auc) {
  if (rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic data: rows must be >= 0, got ", rows));
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return ErrnoStatus(errno, path, "cannot create");

  SyntheticFileStats stats;
  stats.rows = rows;
  std::vector<float> probabilities, labels;
  std::unique_ptr<StreamingAuc> streaming;
  if (exact_auc) {
    probabilities.reserve(rows);
    labels.reserve(rows);
  } else {
    streaming = std::make_unique<StreamingAuc>();
  }
  double probability_sum = 0;
  double loss_sum = 0;
  SyntheticSample sample;
  std::string buffer;
  buffer.reserve(kWriteChunkBytes + 4096);
  bool write_failed = false;
  for (int64_t i = 0; i < rows && !write_failed; ++i) {
    data.Draw(stream, i, &sample);
    data.AppendLine(sample, &buffer);
    const bool positive = sample.label > 0.5f;
    stats.positives += positive ? 1 : 0;
    probability_sum += sample.probability;
    const double p = std::min(std::max(sample.probability, 1e-7), 1.0 - 1e-7);
    loss_sum -= positive ? std::log(p) : std::log1p(-p);
    if (exact_auc) {
      probabilities.push_back(static_cast<float>(sample.probability));
      labels.push_back(sample.label);
    } else {
      streaming->Add(static_cast<float>(sample.probability), sample.label);
    }
    if (buffer.size() >= kWriteChunkBytes) {
      write_failed = std::fwrite(buffer.data(), 1, buffer.size(), file) != buffer.size();
      buffer.clear();
    }
  }
  if (!write_failed && !buffer.empty()) {
    write_failed = std::fwrite(buffer.data(), 1, buffer.size(), file) != buffer.size();
  }
  const int write_errno = errno;
  const bool close_failed = std::fclose(file) != 0;
  if (write_failed || close_failed) {
    return ErrnoStatus(write_failed ? write_errno : errno, path, "cannot write");
  }
  if (rows > 0) {
    stats.mean_probability = probability_sum / static_cast<double>(rows);
    stats.teacher_logloss = loss_sum / static_cast<double>(rows);
  }
  stats.teacher_auc = exact_auc ? Auc(probabilities, labels) : streaming->Auc();
  return stats;
}

}  // namespace worker
}  // namespace ps
