#include "common/job_config.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

// A small valid job; the bad jobs below are this with one mistake.
constexpr char kGoodJob[] = R"pb(name: "t"
tables {
  name: "user"
  dim: 8
  optimizer { type: "adagrad" learning_rate: 0.1 }
}
tables {
  name: "item"
  dim: 4
}
training {
  mode: BOUNDED_STALENESS
  staleness: 2
}
cluster {
  num_shards: 16
  num_servers: 2
  replication_factor: 2
}
)pb";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return text;
}

// Parses `text` as "job.pbtxt", expects INVALID_ARGUMENT and returns the message.
std::string ErrorOf(const std::string& text) {
  const absl::StatusOr<config::Job> job = ParseJob(text, "job.pbtxt");
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(job.status().message());
}

TEST_CASE("a good job parses with its values and defaults", "[common][job]") {
  const absl::StatusOr<config::Job> job = ParseJob(kGoodJob, "job.pbtxt");
  REQUIRE(job.ok());
  REQUIRE(job->tables_size() == 2);
  CHECK(job->tables(0).dim() == 8);
  CHECK(job->tables(0).optimizer().type() == "adagrad");
  CHECK(job->tables(1).optimizer().type() == "sgd");
  CHECK(job->training().mode() == config::Training::BOUNDED_STALENESS);
  CHECK(job->training().sync_quorum() == 1.0f);
  CHECK(job->cluster().num_shards() == 16);
  CHECK(ValidateJob(*job).ok());
}

TEST_CASE("the shipped jobs are valid", "[common][job]") {
  const absl::StatusOr<config::Job> job = LoadJobFile("deploy/jobs/quickstart.pbtxt");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  CHECK(job->cluster().num_servers() == 2);
  // One job a model family, over one schema with multi-valued fields.
  const std::pair<const char*, config::Model::Type> families[] = {
      {"deploy/jobs/dlrm.pbtxt", config::Model::DLRM},
      {"deploy/jobs/wide_deep.pbtxt", config::Model::WIDE_DEEP},
      {"deploy/jobs/deepfm.pbtxt", config::Model::DEEPFM},
      {"deploy/jobs/dcn_v2.pbtxt", config::Model::DCN_V2}};
  for (const auto& [path, type] : families) {
    const absl::StatusOr<config::Job> family = LoadJobFile(path);
    INFO(path << ": " << family.status().ToString());
    REQUIRE(family.ok());
    CHECK(family->model().type() == type);
    CHECK(family->data().format() == config::Data::DELIMITED);
    CHECK(family->data().schema().sparse_size() == 7);
  }
}

TEST_CASE("syntax errors name file, line and column", "[common][job]") {
  SECTION("unknown field") {
    const std::string msg = ErrorOf(Replace(kGoodJob, "dim: 4", "dims: 4"));
    INFO(msg);
    CHECK(absl::StartsWith(msg, "job.pbtxt:9:3: "));
    CHECK(absl::StrContains(msg, "dims"));
  }
  SECTION("unknown mode") {
    const std::string msg = ErrorOf(Replace(kGoodJob, "BOUNDED_STALENESS", "EVENTUAL"));
    INFO(msg);
    CHECK(absl::StartsWith(msg, "job.pbtxt:12:3: "));
    CHECK(absl::StrContains(msg, "EVENTUAL"));
  }
  SECTION("negative dim") {
    const std::string msg = ErrorOf(Replace(kGoodJob, "dim: 8", "dim: -8"));
    CHECK(absl::StartsWith(msg, "job.pbtxt:4:"));
  }
  SECTION("unbalanced brace") {
    const std::string msg = ErrorOf(absl::StrCat(kGoodJob, "cluster {\n"));
    CHECK(absl::StartsWith(msg, "job.pbtxt:"));
  }
}

struct BadJob {
  const char* what;
  const char* from;
  const char* to;
  const char* position;  // expected "job.pbtxt:line:col: " prefix
  const char* message;   // expected to appear in the message
};

TEST_CASE("semantic errors name the field and what is wrong", "[common][job]") {
  const BadJob bad = GENERATE(
      BadJob{"dim 0", "dim: 4", "dim: 0", "job.pbtxt:9:3: ",
             "tables[1] \"item\".dim: dim must be between 1 and 4096, got 0"},
      BadJob{"dim too large", "dim: 8", "dim: 5000", "job.pbtxt:4:3: ",
             "tables[0] \"user\".dim: dim must be between 1 and 4096, got 5000"},
      BadJob{"missing dim", "  dim: 4\n", "", "job.pbtxt:7:1: ", "tables[1] \"item\": missing dim"},
      BadJob{"missing name", "  name: \"item\"\n", "", "job.pbtxt:7:1: ",
             "tables[1]: missing name"},
      BadJob{"duplicate table", "name: \"item\"", "name: \"user\"", "job.pbtxt:8:3: ",
             "duplicate table name \"user\""},
      BadJob{"bad table name", "name: \"item\"", "name: \"it em\"", "job.pbtxt:8:3: ",
             "name must be 1 to 128 characters"},
      BadJob{"unknown optimizer", "type: \"adagrad\"", "type: \"adamw\"", "job.pbtxt:5:15: ",
             "tables[0] \"user\".optimizer.type: unknown optimizer \"adamw\""},
      BadJob{"zero learning rate", "learning_rate: 0.1", "learning_rate: 0", "job.pbtxt:5:31: ",
             "optimizer.learning_rate: must be a positive number, got 0"},
      BadJob{"adam beta1 of 1", "type: \"adagrad\"", "type: \"adam\" beta1: 1", "job.pbtxt:5:28: ",
             "optimizer.beta1: must be in [0, 1), got 1"},
      BadJob{"ftrl positive power", "type: \"adagrad\"", "type: \"ftrl\" lr_power: 0.5",
             "job.pbtxt:5:28: ", "optimizer.lr_power: must be <= 0, got 0.5"},
      BadJob{"rowwise_adagrad accumulator 0", "type: \"adagrad\"",
             "type: \"rowwise_adagrad\" initial_accumulator: 0", "job.pbtxt:5:39: ",
             "optimizer.initial_accumulator: must be > 0 for rowwise_adagrad, got 0"},
      BadJob{"rowwise_adagrad epsilon 0", "type: \"adagrad\"",
             "type: \"rowwise_adagrad\" epsilon: 0", "job.pbtxt:5:39: ",
             "optimizer.epsilon: must be > 0, got 0"},
      BadJob{"rowwise_adagrad negative l2", "type: \"adagrad\"",
             "type: \"rowwise_adagrad\" l2: -1", "job.pbtxt:5:39: ",
             "optimizer.l2: must be >= 0, got -1"},
      BadJob{"ftrl's setting on rowwise_adagrad", "type: \"adagrad\"",
             "type: \"rowwise_adagrad\" ftrl_beta: 1", "job.pbtxt:5:39: ",
             "optimizer.ftrl_beta: is a setting of ftrl, not of rowwise_adagrad"},
      BadJob{"rowwise_adagrad as the dense optimizer", "staleness: 2",
             "staleness: 2\n  dense_optimizer { type: \"rowwise_adagrad\" }", "job.pbtxt:14:21: ",
             "training.dense_optimizer.type: rowwise_adagrad is for embedding tables, not dense "
             "parameters"},
      BadJob{"uniform low >= high", "dim: 4", "dim: 4 initializer { low: 1 high: 1 }",
             "job.pbtxt:9:31: ", "uniform needs low < high"},
      BadJob{"normal stddev 0", "dim: 4", "dim: 4 initializer { kind: NORMAL stddev: 0 }",
             "job.pbtxt:9:37: ", "initializer.stddev: must be > 0, got 0"},
      BadJob{"negative staleness", "staleness: 2", "staleness: -1", "job.pbtxt:13:3: ",
             "training.staleness: must be >= 0, got -1"},
      BadJob{"quorum 0", "staleness: 2", "sync_quorum: 0", "job.pbtxt:13:3: ",
             "training.sync_quorum: must be in (0, 1], got 0"},
      BadJob{"quorum above 1", "staleness: 2", "sync_quorum: 1.5", "job.pbtxt:13:3: ",
             "training.sync_quorum: must be in (0, 1], got 1.5"},
      BadJob{"batch 0", "staleness: 2", "batch_size: 0", "job.pbtxt:13:3: ",
             "training.batch_size: must be > 0"},
      BadJob{"steps and epochs", "staleness: 2", "steps: 10 epochs: 1", "job.pbtxt:13:13: ",
             "set steps or epochs, not both"},
      BadJob{"replication above servers", "replication_factor: 2", "replication_factor: 3",
             "job.pbtxt:18:3: ",
             "cluster.replication_factor: must be between 1 and num_servers (2), got 3"},
      BadJob{"replication 0", "replication_factor: 2", "replication_factor: 0", "job.pbtxt:18:3: ",
             "cluster.replication_factor: must be between 1 and num_servers (2), got 0"},
      BadJob{"reads from the only copy", "replication_factor: 2",
             "replication_factor: 1 read_from_replicas: true", "job.pbtxt:18:25: ",
             "cluster.read_from_replicas: needs replication_factor > 1"},
      BadJob{"bounded staleness reads from async replicas", "replication_factor: 2",
             "replication_factor: 2 replication_mode: ASYNC read_from_replicas: true",
             "job.pbtxt:18:49: ",
             "cluster.read_from_replicas: BOUNDED_STALENESS reads from replicas need SYNC"},
      BadJob{"async replication without replicas", "replication_factor: 2",
             "replication_factor: 1 replication_mode: ASYNC", "job.pbtxt:18:25: ",
             "cluster.replication_mode: ASYNC replication needs replication_factor > 1"},
      BadJob{"zero shards", "num_shards: 16", "num_shards: 0", "job.pbtxt:16:3: ",
             "cluster.num_shards: must be between 1 and 65536, got 0"},
      BadJob{"more servers than shards", "num_shards: 16", "num_shards: 1", "job.pbtxt:17:3: ",
             "need num_shards >= num_servers"},
      BadJob{"checkpoint without dir", "num_shards: 16", "num_shards: 16 checkpoint_every_steps: 5",
             "job.pbtxt:16:18: ", "checkpoints need a checkpoint_dir"},
      BadJob{"timed checkpoint without dir", "num_shards: 16",
             "num_shards: 16 checkpoint_every_seconds: 5", "job.pbtxt:16:18: ",
             "checkpoints need a checkpoint_dir"},
      BadJob{"no full checkpoints", "num_shards: 16", "num_shards: 16 checkpoint_full_every: 0",
             "job.pbtxt:16:18: ", "cluster.checkpoint_full_every: must be >= 1"},
      BadJob{"relative checkpoint dir", "num_shards: 16", "num_shards: 16 checkpoint_dir: \"c\"",
             "job.pbtxt:16:", "must be an absolute path"},
      BadJob{"relative restore_from", "num_shards: 16", "num_shards: 16 restore_from: \"c\"",
             "job.pbtxt:16:", "cluster.restore_from: must be an absolute path"},
      BadJob{"resume without dir", "num_shards: 16", "num_shards: 16 resume: true",
             "job.pbtxt:16:", "cluster.resume: resuming needs a checkpoint_dir"},
      BadJob{"resume and restore_from", "num_shards: 16",
             "num_shards: 16 checkpoint_dir: \"/c\" resume: true restore_from: \"/c/1\"",
             "job.pbtxt:16:", "set one of resume"},
      BadJob{"tiny messages", "num_shards: 16", "num_shards: 16 max_message_bytes: 1000",
             "job.pbtxt:16:18: ", "cluster.max_message_bytes: must be between"},
      BadJob{"model with unknown shared table", "training {",
             "model { shared_table: \"nope\" }\ntraining {", "job.pbtxt:11:9: ",
             "model.shared_table: no table named \"nope\""},
      BadJob{"model with too few tables", "training {", "model { num_sparse_features: 3 }\ntraining {",
             "job.pbtxt:11:9: ", "3 sparse features need 3 tables (or a shared_table), the job has 2"},
      BadJob{"pooling, which has no effect yet", "training {",
             "model { shared_table: \"user\"\n  pooling: MEAN }\ntraining {", "job.pbtxt:12:3: ",
             "model.pooling: has no effect: no field is multi-valued"},
      BadJob{"pooling set to its default", "training {",
             "model { shared_table: \"user\" pooling: SUM }\ntraining {", "job.pbtxt:11:30: ",
             "model.pooling: has no effect: no field is multi-valued"},
      BadJob{"fp16 with a dim over 1024", "dim: 8", "dim: 2048 value_type: FP16",
             "job.pbtxt:4:13: ", "tables[0] \"user\".value_type: value_type FP16 needs dim <= 1024, got 2048"},
      BadJob{"bf16 with a dim over 1024", "dim: 4", "dim: 1025\n  value_type: BF16",
             "job.pbtxt:10:3: ", "tables[1] \"item\".value_type: value_type BF16 needs dim <= 1024, got 1025"},
      BadJob{"unknown value_type", "dim: 4", "dim: 4 value_type: FP8", "job.pbtxt:9:",
             "FP8"},
      BadJob{"zero layer", "training {", "model { shared_table: \"user\" top_mlp: [8, 0] }\ntraining {",
             "job.pbtxt:11:30: ", "model.top_mlp: layer sizes must be > 0"});
  INFO(bad.what);
  const std::string msg = ErrorOf(Replace(kGoodJob, bad.from, bad.to));
  INFO(msg);
  CHECK(absl::StartsWith(msg, bad.position));
  CHECK(absl::StrContains(msg, bad.message));
}

TEST_CASE("compact value types parse, up to dim 1024", "[common][job][compact]") {
  const config::Table::ValueType type = GENERATE(config::Table::FP16, config::Table::BF16);
  const std::string name = config::Table::ValueType_Name(type);
  const absl::StatusOr<config::Job> job = ParseJob(
      Replace(kGoodJob, "dim: 8", "dim: 1024 value_type: " + name), "job.pbtxt");
  REQUIRE(job.ok());
  CHECK(job->tables(0).value_type() == type);
  CHECK(job->tables(1).value_type() == config::Table::FP32);  // the default
  // FP32 keeps every dim.
  CHECK(ParseJob(Replace(kGoodJob, "dim: 8", "dim: 4096 value_type: FP32"), "job.pbtxt").ok());
}

TEST_CASE("a job without tables is refused", "[common][job]") {
  const std::string msg = ErrorOf("name: \"empty\"\n");
  CHECK(msg == "job.pbtxt:1:1: tables: the job needs at least one table");
}

TEST_CASE("a job built in code is validated without positions", "[common][job]") {
  config::Job job;
  config::Table* t = job.add_tables();
  t->set_name("x");
  t->set_dim(0);
  const absl::Status status = ValidateJob(job);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() == "job: tables[0] \"x\".dim: dim must be between 1 and 4096, got 0");
}

TEST_CASE("job files that cannot be read get a specific error", "[common][job]") {
  CHECK(LoadJobFile("/nonexistent/job.pbtxt").status().code() == absl::StatusCode::kNotFound);
  const std::string path = absl::StrCat(testing::TempDir(), "/bad_job.pbtxt");
  {
    std::ofstream out(path);
    out << Replace(kGoodJob, "dim: 4", "dim: 0");
  }
  const absl::Status status = LoadJobFile(path).status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(status.message(), absl::StrCat(path, ":9:3: ")));
  std::remove(path.c_str());
}

TEST_CASE("weight decay is l2 for every optimizer; ftrl's own settings only for ftrl",
          "[common][job][l2]") {
  const std::string with_l2 = Replace(kGoodJob, "learning_rate: 0.1 }", "learning_rate: 0.1 l2: 0.01 }");
  const absl::StatusOr<config::Job> job = ParseJob(with_l2, "job.pbtxt");
  REQUIRE(job.ok());
  CHECK(job->tables(0).optimizer().l2() == 0.01f);
  const std::string msg =
      ErrorOf(Replace(kGoodJob, "learning_rate: 0.1 }", "learning_rate: 0.1 l1: 0.5 }"));
  CHECK(absl::StrContains(msg, "optimizer.l1: is a setting of ftrl, not of adagrad"));
  CHECK(absl::StrContains(ErrorOf(Replace(kGoodJob, "learning_rate: 0.1 }", "learning_rate: 0.1 l2: -1 }")),
                          "optimizer.l2: must be >= 0"));
}

TEST_CASE("rowwise_adagrad is an optimizer of tables", "[common][job][rowwise]") {
  const std::string rowwise =
      Replace(kGoodJob, "type: \"adagrad\" learning_rate: 0.1",
              "type: \"rowwise_adagrad\" learning_rate: 0.1 initial_accumulator: 0.5 l2: 0.01");
  const absl::StatusOr<config::Job> job = ParseJob(rowwise, "job.pbtxt");
  REQUIRE(job.ok());
  CHECK(job->tables(0).optimizer().type() == "rowwise_adagrad");
  CHECK(job->tables(0).optimizer().initial_accumulator() == 0.5f);
  CHECK(IsKnownOptimizer("rowwise_adagrad"));
  // The dense parameters keep every other optimizer.
  const std::string dense =
      Replace(rowwise, "staleness: 2", "staleness: 2\n  dense_optimizer { type: \"adagrad\" }");
  CHECK(ParseJob(dense, "job.pbtxt").ok());
}

TEST_CASE("evaluation during training and early stopping are checked", "[common][job][eval]") {
  const std::string data = "data { eval_paths: \"heldout.tsv\" }\ntraining {";
  const std::string no_dir = Replace(
      Replace(kGoodJob, "training {", data), "staleness: 2",
      "staleness: 2\n  eval_every_epochs: 1\n  early_stopping { metric: LOGLOSS patience: 3 }");
  // The best model is kept in a checkpoint.
  const std::string good = Replace(no_dir, "replication_factor: 2",
                                   "replication_factor: 2\n  checkpoint_dir: \"/ckpt\"");
  const absl::StatusOr<config::Job> job = ParseJob(good, "job.pbtxt");
  REQUIRE(job.ok());
  CHECK(job->training().early_stopping().patience() == 3);
  CHECK(job->training().early_stopping().metric() == config::EarlyStopping::LOGLOSS);

  CHECK(absl::StrContains(
      ErrorOf(Replace(kGoodJob, "staleness: 2", "staleness: 2 eval_every_steps: 10")),
      "training.eval_every_steps: evaluating during training needs data.eval_paths"));
  CHECK(absl::StrContains(
      ErrorOf(Replace(good, "eval_every_epochs: 1", "eval_every_epochs: 1 eval_every_steps: 5")),
      "not both"));
  CHECK(absl::StrContains(ErrorOf(Replace(good, "eval_every_epochs: 1", "")),
                          "training.early_stopping: needs training.eval_every_epochs"));
  CHECK(absl::StrContains(ErrorOf(Replace(good, "patience: 3", "patience: 0")),
                          "early_stopping.patience: must be >= 1"));

  // restore_best (the default) needs a checkpoint_dir; false keeps the last model without one.
  CHECK(job->training().early_stopping().restore_best());
  CHECK(absl::StrContains(ErrorOf(no_dir),
                          "job.pbtxt:16:3: training.early_stopping.restore_best: keeping the best "
                          "model needs cluster.checkpoint_dir"));
  CHECK(absl::StrContains(ErrorOf(Replace(no_dir, "patience: 3", "patience: 3 restore_best: true")),
                          "job.pbtxt:16:48: training.early_stopping.restore_best:"));
  CHECK(ParseJob(Replace(no_dir, "patience: 3", "patience: 3 restore_best: false"), "job.pbtxt")
            .ok());
  // In SYNC, not with periodic checkpoints.
  const std::string sync = Replace(good, "BOUNDED_STALENESS", "SYNC");
  CHECK(ParseJob(sync, "job.pbtxt").ok());
  CHECK(absl::StrContains(
      ErrorOf(Replace(sync, "checkpoint_dir:", "checkpoint_every_steps: 100\n  checkpoint_dir:")),
      "training.early_stopping.restore_best: in a SYNC job, keeping the best model cannot be "
      "combined with periodic checkpoints"));
  CHECK(ParseJob(Replace(good, "checkpoint_dir:", "checkpoint_every_steps: 100\n  checkpoint_dir:"),
                 "job.pbtxt")
            .ok());
}

TEST_CASE("row_cache is refused in SYNC and bounded by the staleness", "[common][job][row_cache]") {
  // kGoodJob is BOUNDED_STALENESS with staleness 2; row_cache goes on line 14.
  const auto with_cache = [](const std::string& cache) {
    return Replace(kGoodJob, "staleness: 2", "staleness: 2\n  row_cache { " + cache + " }");
  };
  const absl::StatusOr<config::Job> job =
      ParseJob(with_cache("max_rows: 1000 refresh_steps: 2"), "job.pbtxt");
  REQUIRE(job.ok());
  CHECK(job->training().row_cache().max_rows() == 1000);
  CHECK(job->training().row_cache().refresh_steps() == 2);
  CHECK(ParseJob(with_cache("max_rows: 1"), "job.pbtxt")->training().row_cache().refresh_steps() ==
        1);
  CHECK_FALSE(ParseJob(kGoodJob, "job.pbtxt")->training().has_row_cache());

  // SYNC: the cache would change its exact result.
  CHECK(ErrorOf(Replace(with_cache("max_rows: 1000"), "BOUNDED_STALENESS", "SYNC")) ==
        "job.pbtxt:14:3: training.row_cache: not in SYNC training: rows served from the cache "
        "would miss pushes of earlier steps, and a SYNC pull must see exactly those (use "
        "BOUNDED_STALENESS or ASYNC)");
  CHECK(ErrorOf(with_cache("refresh_steps: 1")) ==
        "job.pbtxt:14:3: training.row_cache.max_rows: must be between 1 and 1073741824, got 0");
  CHECK(ErrorOf(with_cache("max_rows: 1073741825")) ==
        "job.pbtxt:14:15: training.row_cache.max_rows: must be between 1 and 1073741824, got "
        "1073741825");
  CHECK(ErrorOf(with_cache("max_rows: 10 refresh_steps: 0")) ==
        "job.pbtxt:14:28: training.row_cache.refresh_steps: must be >= 1");
  CHECK(ParseJob(with_cache("max_rows: 10"), "job.pbtxt")->training().row_cache().min_pulls() == 1);
  CHECK(ParseJob(with_cache("max_rows: 10 min_pulls: 15"), "job.pbtxt").ok());
  CHECK(ErrorOf(with_cache("max_rows: 10 min_pulls: 0")) ==
        "job.pbtxt:14:28: training.row_cache.min_pulls: must be between 1 and 15, got 0");
  CHECK(ErrorOf(with_cache("max_rows: 10 min_pulls: 16")) ==
        "job.pbtxt:14:28: training.row_cache.min_pulls: must be between 1 and 15, got 16");
  // BOUNDED_STALENESS: a cached row's age comes out of the staleness bound.
  CHECK(absl::StrContains(ErrorOf(with_cache("max_rows: 10 refresh_steps: 3")),
                          "job.pbtxt:14:28: training.row_cache.refresh_steps: must be at most "
                          "training.staleness (2) in BOUNDED_STALENESS, got 3"));
  CHECK(absl::StrContains(
      ErrorOf(Replace(with_cache("max_rows: 10"), "staleness: 2", "staleness: 0")),
      "training.row_cache.refresh_steps: must be at most training.staleness (0)"));
  // ASYNC has no bound: any refresh_steps >= 1.
  const std::string async =
      Replace(with_cache("max_rows: 10 refresh_steps: 50"), "BOUNDED_STALENESS", "ASYNC");
  CHECK(ParseJob(async, "job.pbtxt").ok());
  CHECK(absl::StrContains(ErrorOf(Replace(async, "refresh_steps: 50", "refresh_steps: 0")),
                          "training.row_cache.refresh_steps: must be >= 1"));
}

TEST_CASE("JobFieldPosition finds where a field was written", "[common][job]") {
  const std::string text =
      "name: \"t\"\n"
      "tables { name: \"emb\" dim: 4 }\n"
      "data {\n"
      "  train_paths: \"a.tsv\"\n"
      "  train_paths: \"b.tsv\"\n"
      "  eval_paths: [\"c.tsv\", \"d.tsv\"]\n"
      "}\n"
      "training { batch_size: 64 }\n";
  REQUIRE(ParseJob(text, "job.pbtxt").ok());
  CHECK(JobFieldPosition(text, "job.pbtxt", "data.train_paths", 0) == "job.pbtxt:4:3");
  CHECK(JobFieldPosition(text, "job.pbtxt", "data.train_paths", 1) == "job.pbtxt:5:3");
  // Elements of a list share its position.
  CHECK(JobFieldPosition(text, "job.pbtxt", "data.eval_paths", 1) == "job.pbtxt:6:3");
  CHECK(JobFieldPosition(text, "job.pbtxt", "training.batch_size") == "job.pbtxt:8:12");
  CHECK(JobFieldPosition(text, "job.pbtxt", "tables.dim") == "job.pbtxt:2:22");
  // Not written, not a field, not a job: the file alone.
  CHECK(JobFieldPosition(text, "job.pbtxt", "training.epochs") == "job.pbtxt");
  CHECK(JobFieldPosition(text, "job.pbtxt", "data.no_such_field") == "job.pbtxt");
  CHECK(JobFieldPosition("tables {", "job.pbtxt", "tables") == "job.pbtxt");
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST_CASE("bounds are checked: admission, eviction and memory_weight", "[common][job][bounds]") {
  struct Case {
    std::string bounds;
    std::string error;
  };
  const Case c = GENERATE(
      Case{"admission { min_count: 0 }",
           "tables[1] \"item\".admission.min_count: min_count must be between 1 and 15"},
      Case{"admission { min_count: 16 }",
           "tables[1] \"item\".admission.min_count: min_count must be between 1 and 15"},
      Case{"admission { min_count: 0 probability: 1.5 }",
           "tables[1] \"item\".admission.min_count: min_count must be between 1 and 15"},
      Case{"admission { min_count: 2 probability: 1.5 }",
           "tables[1] \"item\".admission.probability: probability must be in (0, 1], got 1.5"},
      Case{"admission { probability: 0 }",
           "tables[1] \"item\".admission.probability: probability must be in (0, 1], got 0"},
      Case{"admission { }", "tables[1] \"item\".admission: admits every id"},
      Case{"eviction { ttl_steps: 5 ttl_seconds: 5 }",
           "tables[1] \"item\".eviction.ttl_seconds: set at most one of ttl_steps and ttl_seconds"},
      Case{"memory_weight: 0", "tables[1] \"item\".memory_weight: memory_weight must be > 0"});
  CAPTURE(c.bounds);
  const std::string message = ErrorOf(Replace(kGoodJob, "dim: 4", "dim: 4 " + c.bounds));
  CHECK_THAT(message, Catch::Contains("job.pbtxt:"));
  CHECK_THAT(message, Catch::Contains(c.error));
  // And good ones parse.
  const std::string good =
      Replace(kGoodJob, "dim: 4",
              "dim: 4 admission { min_count: 3 probability: 0.5 sketch_ids: 1000 } "
              "eviction { policy: LFU ttl_seconds: 60 } memory_weight: 2.5");
  const absl::StatusOr<config::Job> job = ParseJob(good, "job.pbtxt");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  CHECK(job->tables(1).admission().min_count() == 3);
  CHECK(job->tables(1).eviction().policy() == config::Eviction::LFU);
  CHECK(job->tables(1).memory_weight() == 2.5f);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A DEEPFM job over delimited text with a header, a multi-valued field and MEAN pooling.
constexpr char kSchemaJob[] = R"job(name: "s"
tables { name: "user" dim: 8 }
tables { name: "tags" dim: 8 }
tables { name: "lin" dim: 1 }
model { type: DEEPFM linear_table: "lin" top_mlp: [16] pooling: MEAN }
data {
  format: DELIMITED
  train_paths: "/d/train.tsv"
  schema {
    header: true
    label: "click"
    dense { column: "price" transform: LOG1P }
    sparse { column: "user_id" table: "user" }
    sparse { column: "tags" table: "tags" separator: "|" max_values: 20 }
  }
}
)job";

TEST_CASE("a schema job with every family's knobs parses", "[common][job_config]") {
  REQUIRE(ParseJob(kSchemaJob, "job.pbtxt").ok());
  // STANDARDIZE without its moments: computed before the run (common/dense_moments.h).
  CHECK(ParseJob(Replace(kSchemaJob, "transform: LOG1P", "transform: STANDARDIZE"), "job.pbtxt")
            .ok());
  const std::string dcn =
      Replace(kSchemaJob, "type: DEEPFM linear_table: \"lin\"", "type: DCN_V2 cross_layers: 3");
  CHECK(ParseJob(dcn, "job.pbtxt").ok());
  const std::string wide = Replace(kSchemaJob, "type: DEEPFM",
                                   "type: WIDE_DEEP wide { fields: \"user_id\" } wide { fields: "
                                   "\"tags\" }");
  CHECK(ParseJob(wide, "job.pbtxt").ok());
  const std::string dlrm = Replace(kSchemaJob, "type: DEEPFM linear_table: \"lin\"",
                                   "type: DLRM bottom_mlp: [8] dot_interaction: true");
  CHECK(ParseJob(dlrm, "job.pbtxt").ok());
}

TEST_CASE("bad schemas and model knobs are refused at file:line:col", "[common][job_config]") {
  const BadJob bad = GENERATE(
      BadJob{"a column named without a header", "header: true", "header: false",
             "job.pbtxt:11:5: ", "data.schema.label: unknown column \"click\""},
      BadJob{"column 0", "column: \"price\"", "column: \"0\"",
             "job.pbtxt:12:13: ", "data.schema.dense[0].column: unknown column \"0\""},
      BadJob{"a field naming no table", "table: \"user\"", "table: \"nope\"",
             "job.pbtxt:13:32: ", "data.schema.sparse[0].table: no table named \"nope\""},
      BadJob{"a field with no table at all", "sparse { column: \"user_id\" table: \"user\" }",
             "sparse { column: \"user_id\" }",
             "job.pbtxt:13:5: ", "data.schema.sparse[0]: names no table"},
      BadJob{"a separator in a dense column", "transform: LOG1P", "separator: \"|\"",
             "job.pbtxt:12:", "no field named \"separator\""},
      BadJob{"the delimiter as separator", "separator: \"|\"", "separator: \"\\t\"",
             "job.pbtxt:14:", "data.schema.sparse[1].separator: must be one character, other"},
      BadJob{"max_values of a single-valued field", "table: \"user\"",
             "table: \"user\" max_values: 3", "job.pbtxt:13:", "is for multi-valued fields"},
      BadJob{"STANDARDIZE with a mean only", "transform: LOG1P", "transform: STANDARDIZE mean: 3",
             "job.pbtxt:12:", "data.schema.dense[0].mean: STANDARDIZE takes both mean and stddev"},
      BadJob{"STANDARDIZE with a stddev of 0", "transform: LOG1P",
             "transform: STANDARDIZE mean: 3 stddev: 0",
             "job.pbtxt:12:", "STANDARDIZE needs a finite mean and a stddev > 0"},
      BadJob{"mean without STANDARDIZE", "transform: LOG1P", "mean: 3",
             "job.pbtxt:12:", "data.schema.dense[0].mean: is used only by transform STANDARDIZE"},
      BadJob{"CRITEO with a schema", "format: DELIMITED", "format: CRITEO",
             "job.pbtxt:9:3: ", "format CRITEO is a preset schema"},
      BadJob{"a count that disagrees", "top_mlp: [16]", "top_mlp: [16] num_sparse_features: 3",
             "job.pbtxt:5:", "is 3 but data.schema has 2 sparse fields"},
      BadJob{"linear table of dim 8", "linear_table: \"lin\"", "linear_table: \"user\"",
             "job.pbtxt:5:", "model.linear_table: table \"user\" has dim 8"},
      BadJob{"DEEPFM without linear table", "linear_table: \"lin\"", "",
             "job.pbtxt:5:", "a DEEPFM model needs linear_table"},
      BadJob{"DCN's knob on DEEPFM", "top_mlp: [16]", "top_mlp: [16] cross_layers: 2",
             "job.pbtxt:5:", "model.cross_layers: is DCN_V2's; a DEEPFM model has none"},
      BadJob{"DEEPFM fields of two dims", "name: \"tags\" dim: 8", "name: \"tags\" dim: 4",
             "job.pbtxt:5:", "needs every field's table to have one dim"},
      BadJob{"wide feature of an unknown field", "type: DEEPFM",
             "type: WIDE_DEEP wide { fields: \"nope\" }",
             "job.pbtxt:5:", "no sparse field named \"nope\""},
      BadJob{"a cross of a multi-valued field", "type: DEEPFM",
             "type: WIDE_DEEP wide { fields: [\"user_id\", \"tags\"] }",
             "job.pbtxt:5:", "crosses multi-valued field \"tags\""},
      BadJob{"two fields of one name", "column: \"tags\" table", "column: \"user_id\" table",
             "job.pbtxt:14:", "two sparse fields are named \"user_id\""});
  INFO(bad.what);
  const std::string msg = ErrorOf(Replace(kSchemaJob, bad.from, bad.to));
  INFO(msg);
  CHECK(absl::StartsWith(msg, bad.position));
  CHECK(absl::StrContains(msg, bad.message));
}

TEST_CASE("DELIMITED data without a schema is refused", "[common][job_config]") {
  const std::string msg = ErrorOf(absl::StrCat(kGoodJob, "data { format: DELIMITED }\n"));
  CHECK(absl::StrContains(msg, "data.format: DELIMITED data needs a schema"));
}

}  // namespace
}  // namespace ps
