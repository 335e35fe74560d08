#include "worker/data/binary_convert.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/schema.h"

namespace ps {
namespace worker {
namespace {

// `lines` Criteo lines of 2 integer and 3 categorical features; line `bad`, if any, malformed.
void WriteCriteo(const std::string& path, int lines, int bad = -1) {
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    if (i == bad) {
      out << "2\t1\t1\ta\tb\tc\n";  // label 2
      continue;
    }
    out << i % 2 << '\t' << i << '\t' << (i % 3 == 0 ? "" : "7");
    for (int c = 0; c < 3; ++c) out << '\t' << absl::StrFormat("%x", i * 7 + c);
    out << '\n';
  }
}

config::Job CriteoJob(const std::vector<std::string>& train, const std::vector<std::string>& eval) {
  config::Job job;
  job.mutable_model()->set_num_dense_features(2);
  job.mutable_model()->set_num_sparse_features(3);
  for (const std::string& path : train) job.mutable_data()->add_train_paths(path);
  for (const std::string& path : eval) job.mutable_data()->add_eval_paths(path);
  return job;
}

// All of the text's samples, as CriteoReader parses them.
Batch ParseAll(const std::vector<std::string>& paths, const SchemaOptions& schema) {
  auto reader = CriteoReader::Open(paths, 0, 1, schema);
  REQUIRE(reader.ok());
  Batch all;
  REQUIRE((*reader)->Next(1000, &all).ok());
  if (all.offsets.size() != size_t(all.size) * schema.num_sparse + 1) {
    SetSingleValuedOffsets(schema.num_sparse, &all);
  }
  return all;
}

TEST_CASE("ConvertJobData writes the job's train and eval samples as the text reader parses them",
          "[worker][binary_convert]") {
  auto dir = testing::ScopedTempDir::Create("binary_convert");
  REQUIRE(dir.ok());
  const std::string a = (*dir)->path() + "/day-0.tsv", b = (*dir)->path() + "/day-1.tsv",
                    eval = (*dir)->path() + "/eval.tsv";
  WriteCriteo(a, 30, 4);
  WriteCriteo(b, 25);
  WriteCriteo(eval, 9);
  const config::Job job = CriteoJob({(*dir)->path() + "/day-*.tsv"}, {eval});
  ConvertOptions options;
  options.out_dir = (*dir)->path() + "/bin";
  options.chunk_samples = 16;
  const auto summary = ConvertJobData(job, options);
  REQUIRE(summary.ok());
  CHECK(summary->train.path == options.out_dir + "/train.bin");
  CHECK(summary->train.samples == 54);
  CHECK(summary->train.skipped_lines == 1);
  CHECK(summary->train.skip_reports ==
        std::vector<std::string>{a + ":5: label must be 0 or 1, got 2"});
  CHECK(summary->train.input_files == 2);
  CHECK(summary->train.chunks == 4);
  REQUIRE(summary->eval.has_value());
  CHECK(summary->eval->samples == 9);

  const SchemaOptions schema{2, 3};
  const Batch text = ParseAll({a, b}, schema);
  auto reader = BinaryReader::Open({summary->train.path}, BinarySchema::Of(schema));
  REQUIRE(reader.ok());
  CHECK(summary->train.bytes > 0);
  Batch binary;
  REQUIRE((*reader)->Read(0, 54, &binary).ok());
  CHECK(binary.labels == text.labels);
  CHECK(binary.dense == text.dense);
  CHECK(binary.keys == text.keys);
  CHECK(binary.offsets == text.offsets);
  // The names a Criteo job gives.
  CHECK((*reader)->schema().dense_names == std::vector<std::string>{"I1", "I2"});
  CHECK((*reader)->schema().sparse_names == std::vector<std::string>{"C1", "C2", "C3"});

  auto eval_reader = BinaryReader::Open({summary->eval->path}, BinarySchema::Of(schema));
  REQUIRE(eval_reader.ok());
  REQUIRE((*eval_reader)->Read(0, 9, &binary).ok());
  CHECK(binary.keys == ParseAll({eval}, schema).keys);
}

TEST_CASE("a delimited log with multi-valued fields converts exactly", "[worker][binary_convert]") {
  auto dir = testing::ScopedTempDir::Create("binary_convert");
  REQUIRE(dir.ok());
  const std::string csv = (*dir)->path() + "/log.csv";
  std::ofstream(csv) << "tags,click,price,user\n"
                        "a|b|c,1,3.5,u1\n"
                        ",0,,u2\n"
                        "x,7,1,u3\n"  // a bad label: skipped
                        "d||d,1,2,u1\n";
  config::Job job;
  config::Data* data = job.mutable_data();
  data->set_format(config::Data::DELIMITED);
  data->add_train_paths(csv);
  config::Schema* s = data->mutable_schema();
  s->set_delimiter(config::Schema::COMMA);
  s->set_header(true);
  s->set_label("click");
  s->add_dense()->set_column("price");
  s->add_sparse()->set_column("user");
  config::SparseField* tags = s->add_sparse();
  tags->set_column("tags");
  tags->set_separator("|");
  ConvertOptions options;
  options.out_dir = (*dir)->path() + "/bin";
  const auto summary = ConvertJobData(job, options);
  INFO(summary.status().ToString());
  REQUIRE(summary.ok());
  CHECK(summary->train.samples == 3);
  CHECK(summary->train.skipped_lines == 1);
  absl::StatusOr<SchemaOptions> schema = SchemaOf(job);
  REQUIRE(schema.ok());
  const Batch text = ParseAll({csv}, *schema);
  auto reader = BinaryReader::Open({summary->train.path}, BinarySchema::Of(*schema));
  REQUIRE(reader.ok());
  Batch binary;
  REQUIRE((*reader)->Read(0, 3, &binary).ok());
  CHECK(binary.labels == text.labels);
  CHECK(binary.dense == text.dense);
  CHECK(binary.keys == text.keys);
  CHECK(binary.offsets == text.offsets);
  CHECK(binary.offsets == std::vector<uint32_t>{0, 1, 4, 5, 5, 6, 8});
  CHECK((*reader)->schema().sparse_names == std::vector<std::string>{"user", "tags"});
}

TEST_CASE("ConvertJobData refuses what it cannot convert", "[worker][binary_convert]") {
  auto dir = testing::ScopedTempDir::Create("binary_convert");
  REQUIRE(dir.ok());
  ConvertOptions options;
  options.out_dir = (*dir)->path() + "/bin";

  config::Job binary = CriteoJob({"x.bin"}, {});
  binary.mutable_data()->set_format(config::Data::BINARY);
  CHECK(ConvertJobData(binary, options).status().code() == absl::StatusCode::kInvalidArgument);
  config::Job delimited = CriteoJob({"x.csv"}, {});
  delimited.mutable_data()->set_format(config::Data::DELIMITED);  // without its schema
  CHECK(ConvertJobData(delimited, options).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ConvertJobData(CriteoJob({}, {}), options).status().code() ==
        absl::StatusCode::kInvalidArgument);

  const auto missing = ConvertJobData(CriteoJob({(*dir)->path() + "/none.tsv"}, {}), options);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  options.out_dir = (*dir)->path() + "/no/such";
  WriteCriteo((*dir)->path() + "/a.tsv", 3);
  CHECK(ConvertJobData(CriteoJob({(*dir)->path() + "/a.tsv"}, {}), options).status().code() ==
        absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace worker
}  // namespace ps
