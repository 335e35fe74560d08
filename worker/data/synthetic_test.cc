#include "worker/data/synthetic.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/classifier_metrics.h"

namespace ps {
namespace worker {
namespace {

std::string TempPath(const std::string& suffix) {
  static std::atomic<int> counter{0};
  return absl::StrCat(testing::TempDir(), "/synthetic_test.", getpid(), ".", counter.fetch_add(1),
                      suffix);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<SyntheticData> MustCreate(const SyntheticOptions& options) {
  absl::StatusOr<std::unique_ptr<SyntheticData>> data = SyntheticData::Create(options);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  return std::move(*data);
}

SyntheticFileStats MustWrite(const SyntheticData& data, uint64_t stream, int64_t rows,
                             const std::string& path, bool exact_auc = true) {
  absl::StatusOr<SyntheticFileStats> stats =
      WriteSyntheticFile(data, stream, rows, path, exact_auc);
  INFO(stats.status().ToString());
  REQUIRE(stats.ok());
  return *stats;
}

SyntheticOptions SmallOptions() {
  SyntheticOptions options;
  options.cardinalities = {1000};
  options.seed = 7;
  return options;
}

TEST_CASE("generation is deterministic given the seed", "[worker][synthetic]") {
  const SyntheticOptions options = SmallOptions();
  const std::unique_ptr<SyntheticData> a = MustCreate(options);
  const std::unique_ptr<SyntheticData> b = MustCreate(options);
  CHECK(a->bias() == b->bias());
  const std::string path_a = TempPath(".tsv");
  const std::string path_b = TempPath(".tsv");
  const SyntheticFileStats stats_a = MustWrite(*a, SyntheticData::kTrainStream, 3000, path_a);
  const SyntheticFileStats stats_b = MustWrite(*b, SyntheticData::kTrainStream, 3000, path_b);
  const std::string bytes = ReadBytes(path_a);
  CHECK(bytes.size() > 3000 * 40);
  CHECK(bytes == ReadBytes(path_b));
  CHECK(stats_a.positives == stats_b.positives);
  CHECK(stats_a.teacher_auc == stats_b.teacher_auc);

  // A row depends on (seed, stream, index) only: a shorter file is a prefix of a longer one.
  const std::string prefix = TempPath(".tsv");
  MustWrite(*a, SyntheticData::kTrainStream, 1000, prefix);
  CHECK(absl::StartsWith(bytes, ReadBytes(prefix)));

  // Another stream or another seed gives other rows.
  const std::string heldout = TempPath(".tsv");
  MustWrite(*a, SyntheticData::kHeldoutStream, 1000, heldout);
  CHECK(ReadBytes(heldout) != ReadBytes(prefix));
  SyntheticOptions other = options;
  other.seed = 8;
  const std::string other_path = TempPath(".tsv");
  MustWrite(*MustCreate(other), SyntheticData::kTrainStream, 1000, other_path);
  CHECK(ReadBytes(other_path) != ReadBytes(prefix));
}

TEST_CASE("the files parse with CriteoReader into the drawn samples", "[worker][synthetic]") {
  SyntheticOptions options = SmallOptions();
  SchemaOptions schema;
  SECTION("Criteo's schema") {}
  SECTION("another schema, cardinalities per field") {
    options.num_dense = 3;
    options.num_sparse = 4;
    options.cardinalities = {1, 10, 100, 100000};
    schema = SchemaOptions{3, 4};
  }
  const std::unique_ptr<SyntheticData> data = MustCreate(options);
  const std::string path = TempPath(".tsv");
  const int kRows = 2000;
  MustWrite(*data, SyntheticData::kTrainStream, kRows, path);

  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open({path}, 0, 1, schema);
  REQUIRE(reader.ok());
  Batch batch;
  absl::StatusOr<int> n = (*reader)->Next(kRows + 1, &batch);
  REQUIRE(n.ok());
  REQUIRE(*n == kRows);
  CHECK((*reader)->skipped_lines() == 0);
  SyntheticSample sample;
  int empty_dense = 0;
  for (int i = 0; i < kRows; ++i) {
    data->Draw(SyntheticData::kTrainStream, i, &sample);
    REQUIRE(batch.labels[i] == sample.label);
    for (int d = 0; d < options.num_dense; ++d) {
      REQUIRE(sample.dense[d] >= -1);
      empty_dense += sample.dense[d] < 0 ? 1 : 0;
      const float expected =
          sample.dense[d] > 0 ? static_cast<float>(std::log1p(double(sample.dense[d]))) : 0.0f;
      REQUIRE(batch.dense[i * options.num_dense + d] == expected);
    }
    for (int f = 0; f < options.num_sparse; ++f) {
      const std::string text = absl::StrFormat("%08x", data->Code(f, sample.values[f]));
      REQUIRE(batch.keys[i * options.num_sparse + f] == CriteoKey(f, text));
    }
  }
  CHECK(empty_dense > 0);  // some integer features are empty
}

TEST_CASE("the positive rate matches the teacher's mean probability", "[worker][synthetic]") {
  const double target = GENERATE(0.2, 0.3, 0.5);
  SyntheticOptions options = SmallOptions();
  options.positive_rate = target;
  const std::unique_ptr<SyntheticData> data = MustCreate(options);
  const int64_t kRows = 100000;
  const SyntheticFileStats stats =
      MustWrite(*data, SyntheticData::kTrainStream, kRows, TempPath(".tsv"), false);
  const double rate = static_cast<double>(stats.positives) / kRows;
  const double sigma = std::sqrt(target * (1 - target) / kRows);
  CHECK(std::abs(rate - stats.mean_probability) < 5 * sigma);
  // The bias is calibrated on another stream, so the mean probability is near the target.
  CHECK(std::abs(stats.mean_probability - target) < 0.01);
}

TEST_CASE("the default teacher is well above chance", "[worker][synthetic]") {
  const std::unique_ptr<SyntheticData> data = MustCreate(SyntheticOptions{});
  const SyntheticFileStats stats =
      MustWrite(*data, SyntheticData::kHeldoutStream, 50000, TempPath(".tsv"));
  CHECK(stats.teacher_auc > 0.78);
  CHECK(stats.teacher_auc < 0.86);
  const double rate = static_cast<double>(stats.positives) / stats.rows;
  CHECK(rate > 0.2);
  CHECK(rate < 0.5);
  // Better than predicting the base rate.
  const double base_logloss = -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate));
  CHECK(stats.teacher_logloss < base_logloss - 0.05);
  // The streaming AUC agrees.
  const SyntheticFileStats streaming =
      MustWrite(*data, SyntheticData::kHeldoutStream, 50000, TempPath(".tsv"), false);
  CHECK(std::abs(streaming.teacher_auc - stats.teacher_auc) < 1e-3);
}

TEST_CASE("a teacher without weights is chance", "[worker][synthetic]") {
  SyntheticOptions options = SmallOptions();
  options.teacher_scale = 0;
  options.dense_scale = 0;
  const SyntheticFileStats stats =
      MustWrite(*MustCreate(options), SyntheticData::kTrainStream, 20000, TempPath(".tsv"));
  CHECK(stats.teacher_auc == 0.5);
  CHECK(stats.mean_probability == Approx(0.3).epsilon(1e-6));
}

TEST_CASE("the logit is the teacher's sum", "[worker][synthetic]") {
  SyntheticOptions options = SmallOptions();
  // The last field is too large for the tabulated weights: both paths are checked.
  options.num_sparse = 3;
  options.cardinalities = {100, 5000, (1 << 20) + 1};
  const std::unique_ptr<SyntheticData> data = MustCreate(options);
  SyntheticSample sample;
  for (int i = 0; i < 1000; ++i) {
    data->Draw(SyntheticData::kTrainStream, i, &sample);
    double logit = data->bias();
    for (int d = 0; d < options.num_dense; ++d) {
      if (sample.dense[d] >= 0) logit += data->DenseWeight(d) * std::log1p(double(sample.dense[d]));
    }
    for (int f = 0; f < options.num_sparse; ++f) {
      REQUIRE(sample.values[f] < options.cardinalities[f]);
      logit += data->Weight(f, sample.values[f]);
    }
    REQUIRE(sample.logit == Approx(logit).margin(1e-5));
    REQUIRE(sample.probability == Approx(1 / (1 + std::exp(-sample.logit))));
  }
}

TEST_CASE("Zipf frequencies decrease with rank", "[worker][synthetic]") {
  SyntheticOptions options = SmallOptions();
  options.num_dense = 0;
  options.num_sparse = 4;
  options.cardinalities = {10000};
  const std::unique_ptr<SyntheticData> data = MustCreate(options);
  const int kRows = 200000;
  std::vector<std::vector<int>> counts(4, std::vector<int>(10000, 0));
  SyntheticSample sample;
  for (int i = 0; i < kRows; ++i) {
    data->Draw(SyntheticData::kTrainStream, i, &sample);
    for (int f = 0; f < 4; ++f) ++counts[f][sample.values[f]];
  }
  for (int f = 0; f < 4; ++f) {
    for (int k = 0; k < 20; ++k) {
      INFO("field " << f << " rank " << k);
      const double expected = data->ValueProbability(f, k) * kRows;
      CHECK(std::abs(counts[f][k] - expected) < 5 * std::sqrt(expected));
      if (k < 8) CHECK(counts[f][k] > counts[f][k + 1]);
    }
    // Decreasing on the whole: decade by decade.
    int previous = kRows;
    for (int begin = 10; begin < 10000; begin *= 10) {
      int total = 0;
      for (int k = begin; k < begin + 10; ++k) total += counts[f][k];
      CHECK(total < previous);
      previous = total;
    }
  }
  CHECK(data->ValueProbability(0, 0) / data->ValueProbability(0, 9) == Approx(std::pow(10.0, 1.1)));
}

TEST_CASE("hex codes are distinct and not ordered by frequency", "[worker][synthetic]") {
  const std::unique_ptr<SyntheticData> data = MustCreate(SyntheticOptions{});
  for (int f = 0; f < 26; ++f) {
    std::set<uint32_t> codes;
    int increasing = 0;
    for (uint32_t v = 0; v < 10000; ++v) {
      codes.insert(data->Code(f, v));
      if (v > 0 && data->Code(f, v) > data->Code(f, v - 1)) ++increasing;
    }
    CHECK(codes.size() == 10000);
    CHECK(increasing > 4000);
    CHECK(increasing < 6000);
  }
  CHECK(data->Code(0, 0) != data->Code(1, 0));
}

TEST_CASE("bad options are refused", "[worker][synthetic]") {
  const auto refused = [](void (*change)(SyntheticOptions*), const char* name) {
    SyntheticOptions options;
    change(&options);
    const absl::Status status = SyntheticData::Create(options).status();
    INFO(status.ToString());
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), name));
  };
  refused([](SyntheticOptions* o) { o->num_dense = -1; }, "num_dense");
  refused([](SyntheticOptions* o) { o->num_sparse = 1001; }, "num_sparse");
  refused([](SyntheticOptions* o) { o->cardinalities = {}; }, "cardinalities");
  refused([](SyntheticOptions* o) { o->cardinalities = {10, 20}; }, "cardinalities");
  refused([](SyntheticOptions* o) { o->cardinalities = {0}; }, "cardinalities");
  refused([](SyntheticOptions* o) { o->cardinalities = {(1 << 24) + 1}; }, "cardinalities");
  refused([](SyntheticOptions* o) { o->zipf = -0.5; }, "zipf");
  refused([](SyntheticOptions* o) { o->zipf = NAN; }, "zipf");
  refused([](SyntheticOptions* o) { o->teacher_scale = -1; }, "teacher_scale");
  refused([](SyntheticOptions* o) { o->dense_scale = INFINITY; }, "dense_scale");
  refused([](SyntheticOptions* o) { o->positive_rate = 0; }, "positive_rate");
  refused([](SyntheticOptions* o) { o->positive_rate = 1; }, "positive_rate");
}

SyntheticOptions LongTailOptions() {
  SyntheticOptions options;
  options.long_tail = true;
  options.cardinalities = {100000000};
  options.zipf = 1.05;
  options.seed = 7;
  return options;
}

// The fields' values of rows [0, rows) of `stream`.
std::vector<std::vector<uint64_t>> DrawValues(const SyntheticData& data, uint64_t stream,
                                              int rows) {
  std::vector<std::vector<uint64_t>> values(data.options().num_sparse);
  SyntheticSample sample;
  for (int i = 0; i < rows; ++i) {
    data.Draw(stream, i, &sample);
    for (int f = 0; f < data.options().num_sparse; ++f) values[f].push_back(sample.values[f]);
  }
  return values;
}

TEST_CASE("long-tail ids are mostly seen once and the teacher stays well above chance",
          "[worker][synthetic][long_tail]") {
  const std::unique_ptr<SyntheticData> data = MustCreate(LongTailOptions());
  constexpr int kRows = 20000;
  std::vector<std::vector<uint64_t>> values = DrawValues(*data, SyntheticData::kTrainStream, kRows);
  for (int f = 0; f < data->options().num_sparse; ++f) {
    INFO("field " << f);
    std::vector<uint64_t>& v = values[f];
    std::sort(v.begin(), v.end());
    REQUIRE(v.back() < 100000000);
    int distinct = 0, once = 0;
    for (size_t i = 0; i < v.size();) {
      size_t j = i;
      while (j < v.size() && v[j] == v[i]) ++j;
      ++distinct;
      once += j - i == 1 ? 1 : 0;
      i = j;
    }
    // About half the rows hold a value of their own; most distinct values are seen once.
    CHECK(once > kRows * 0.4);
    CHECK(once > distinct * 0.8);
    CHECK(distinct == Approx(data->ExpectedDistinct(f, kRows)).epsilon(0.03));
  }
  const SyntheticFileStats stats =
      MustWrite(*data, SyntheticData::kHeldoutStream, 50000, TempPath(".tsv"));
  CHECK(stats.teacher_auc > 0.78);
  CHECK(stats.teacher_auc < 0.86);
  CHECK(stats.mean_probability == Approx(0.3).margin(0.01));
}

TEST_CASE("long-tail generation is deterministic and its files parse",
          "[worker][synthetic][long_tail]") {
  SyntheticOptions options = LongTailOptions();
  options.num_dense = 3;
  options.num_sparse = 4;
  options.cardinalities = {1, 1000, 100000000, int64_t{1} << 40};
  const std::unique_ptr<SyntheticData> data = MustCreate(options);
  const std::string path = TempPath(".tsv");
  constexpr int kRows = 3000;
  MustWrite(*data, SyntheticData::kTrainStream, kRows, path);
  const std::string bytes = ReadBytes(path);
  const std::string again = TempPath(".tsv");
  MustWrite(*MustCreate(options), SyntheticData::kTrainStream, kRows, again);
  CHECK(ReadBytes(again) == bytes);
  const std::string prefix = TempPath(".tsv");
  MustWrite(*data, SyntheticData::kTrainStream, 1000, prefix);
  CHECK(absl::StartsWith(bytes, ReadBytes(prefix)));
  SyntheticOptions other = options;
  other.seed = 8;
  const std::string other_path = TempPath(".tsv");
  MustWrite(*MustCreate(other), SyntheticData::kTrainStream, 1000, other_path);
  CHECK(ReadBytes(other_path) != ReadBytes(prefix));

  absl::StatusOr<std::unique_ptr<CriteoReader>> reader =
      CriteoReader::Open({path}, 0, 1, SchemaOptions{3, 4});
  REQUIRE(reader.ok());
  Batch batch;
  absl::StatusOr<int> n = (*reader)->Next(kRows + 1, &batch);
  REQUIRE(n.ok());
  REQUIRE(*n == kRows);
  CHECK((*reader)->skipped_lines() == 0);
  SyntheticSample sample;
  uint64_t largest = 0;
  for (int i = 0; i < kRows; ++i) {
    data->Draw(SyntheticData::kTrainStream, i, &sample);
    REQUIRE(batch.labels[i] == sample.label);
    double logit = data->bias();
    for (int d = 0; d < options.num_dense; ++d) {
      if (sample.dense[d] >= 0) logit += data->DenseWeight(d) * std::log1p(double(sample.dense[d]));
    }
    for (int f = 0; f < options.num_sparse; ++f) {
      REQUIRE(sample.values[f] < static_cast<uint64_t>(options.cardinalities[f]));
      const std::string text = absl::StrFormat("%016x", data->LongTailCode(f, sample.values[f]));
      REQUIRE(batch.keys[i * options.num_sparse + f] == CriteoKey(f, text));
      logit += data->Weight(f, sample.values[f]);
    }
    REQUIRE(sample.logit == Approx(logit).margin(1e-9));
    largest = std::max(largest, sample.values[3]);
  }
  // Over 2^40 values, Zipf(1.05) reaches far beyond 32 bits.
  CHECK(largest > (uint64_t{1} << 32));
}

TEST_CASE("long-tail frequencies of the top ranks are Zipf's", "[worker][synthetic][long_tail]") {
  SyntheticOptions options = LongTailOptions();
  options.num_dense = 0;
  options.num_sparse = 2;
  options.cardinalities = {1000};
  const std::unique_ptr<SyntheticData> data = MustCreate(options);
  constexpr int kRows = 200000;
  const std::vector<std::vector<uint64_t>> values =
      DrawValues(*data, SyntheticData::kTrainStream, kRows);
  for (int f = 0; f < 2; ++f) {
    std::vector<int> counts(1000, 0);
    for (const uint64_t v : values[f]) ++counts[v];
    for (int k = 0; k < 20; ++k) {
      INFO("field " << f << " rank " << k);
      const double expected = data->ValueProbability(f, k) * kRows;
      CHECK(std::abs(counts[k] - expected) < 5 * std::sqrt(expected));
    }
  }
  CHECK(data->ValueProbability(0, 0) / data->ValueProbability(0, 9) ==
        Approx(std::pow(10.0, 1.05)));
  CHECK(data->ValueProbability(0, 1000) == 0);
}

TEST_CASE("long-tail codes are distinct and spread over the key space",
          "[worker][synthetic][long_tail]") {
  const std::unique_ptr<SyntheticData> data = MustCreate(LongTailOptions());
  for (int f = 0; f < 26; ++f) {
    std::set<uint64_t> codes;
    std::vector<int> top_nibble(16, 0);
    for (uint64_t v = 0; v < 16000; ++v) {
      const uint64_t code = data->LongTailCode(f, v);
      codes.insert(code);
      ++top_nibble[code >> 60];
    }
    CHECK(codes.size() == 16000);
    for (const int count : top_nibble) {
      CHECK(count > 1000 - 5 * 31);
      CHECK(count < 1000 + 5 * 31);
    }
  }
  CHECK(data->LongTailCode(0, 0) != data->LongTailCode(1, 0));
}

TEST_CASE("long-tail cardinalities reach 2^40", "[worker][synthetic][long_tail]") {
  SyntheticOptions options = LongTailOptions();
  options.cardinalities = {int64_t{1} << 40};
  CHECK(SyntheticData::Create(options).ok());
  options.cardinalities = {(int64_t{1} << 40) + 1};
  const absl::Status status = SyntheticData::Create(options).status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "cardinalities"));
  CHECK(absl::StrContains(status.message(), "long-tail"));
}

TEST_CASE("WriteSyntheticFile reports files it cannot write", "[worker][synthetic]") {
  const std::unique_ptr<SyntheticData> data = MustCreate(SmallOptions());
  const std::string path = TempPath(".missing_dir/out.tsv");
  const absl::Status status =
      WriteSyntheticFile(*data, SyntheticData::kTrainStream, 10, path, true).status();
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(status.message(), path));
  CHECK(WriteSyntheticFile(*data, SyntheticData::kTrainStream, -1, TempPath(".tsv"), true)
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
  // Zero rows: an empty file.
  const std::string empty = TempPath(".tsv");
  const SyntheticFileStats stats = MustWrite(*data, SyntheticData::kTrainStream, 0, empty);
  CHECK(stats.rows == 0);
  CHECK(stats.teacher_auc == 0.5);
  CHECK(ReadBytes(empty).empty());
}

}  // namespace
}  // namespace worker
}  // namespace ps
