#include "worker/tools/teacher_data.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/schema.h"

namespace ps {
namespace worker {
namespace {

// A job of the family `type` over a log with a header: 3 dense columns, 3 single-valued fields
// and 2 multi-valued ones (one named by number), some pooled by MEAN.
std::string FamilyJob(const std::string& type) {
  std::string model;
  if (type == "DLRM") model = "type: DLRM bottom_mlp: [8, 4] dot_interaction: true";
  if (type == "WIDE_DEEP") {
    model = R"(type: WIDE_DEEP linear_table: "lin" wide { fields: "user" }
               wide { fields: ["user", "item"] } wide { fields: "tags" })";
  }
  if (type == "DEEPFM") model = R"(type: DEEPFM linear_table: "lin")";
  if (type == "DCN_V2") model = "type: DCN_V2 cross_layers: 2 cross_rank: 4";
  return absl::StrCat(R"job(name: "teacher"
tables { name: "emb" dim: 4 }
tables { name: "lin" dim: 1 }
model { )job",
                      model, R"job( top_mlp: [8] shared_table: "emb" }
data {
  format: DELIMITED
  train_paths: "/unused"
  schema {
    header: true
    label: "click"
    dense { column: "price" transform: LOG1P }
    dense { column: "age" transform: LOG1P }
    dense { column: "3" }
    sparse { column: "user" }
    sparse { column: "item" }
    sparse { column: "site" }
    sparse { column: "tags" separator: "|" max_values: 5 pooling: MEAN }
    sparse { column: "9" name: "hist" separator: " " max_values: 20 }
  }
}
)job");
}

TEST_CASE("a teacher of each family writes data its job's reader reads whole",
          "[worker][teacher_data]") {
  const std::string type = GENERATE("DLRM", "WIDE_DEEP", "DEEPFM", "DCN_V2");
  CAPTURE(type);
  absl::StatusOr<config::Job> job = ParseJob(FamilyJob(type), "job.pbtxt");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  TeacherDataOptions options;
  options.cardinality = 50;
  options.seed = 4;
  auto teacher = TeacherData::Create(*job, options);
  INFO(teacher.status().ToString());
  REQUIRE(teacher.ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/teacher_", type, ".tsv");
  absl::StatusOr<TeacherFileStats> stats =
      (*teacher)->Write(TeacherData::kTrainStream, 5000, path);
  REQUIRE(stats.ok());
  CHECK(stats->rows == 5000);
  // The positive rate is calibrated to 0.3 and the teacher is informative.
  CHECK(stats->positives > 1200);
  CHECK(stats->positives < 1800);
  CHECK(stats->teacher_auc > 0.7);

  absl::StatusOr<SchemaOptions> schema = SchemaOf(*job);
  REQUIRE(schema.ok());
  auto reader = CriteoReader::Open({path}, 0, 1, *schema);
  INFO(reader.status().ToString());
  REQUIRE(reader.ok());
  Batch batch;
  absl::StatusOr<int> n = (*reader)->Next(10000, &batch);
  REQUIRE(n.ok());
  CHECK(*n == 5000);
  CHECK((*reader)->skipped_lines() == 0);
  CHECK_FALSE(batch.SingleValued());
  // Every multi-valued field has 1 to max_values values.
  for (int r = 0; r < batch.size; ++r) {
    const uint32_t* off = batch.offsets.data() + r * 5;
    CHECK(off[4] - off[3] >= 1);
    CHECK(off[4] - off[3] <= 5);
    CHECK(off[5] - off[4] <= 20);
  }

  // The same options write the same bytes; another seed other ones.
  const std::string again = path + ".again";
  REQUIRE((*TeacherData::Create(*job, options))->Write(TeacherData::kTrainStream, 5000, again).ok());
  const auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  CHECK(bytes(path) == bytes(again));
  CHECK(absl::StartsWith(bytes(path), (*teacher)->header()));
}

}  // namespace
}  // namespace worker
}  // namespace ps
