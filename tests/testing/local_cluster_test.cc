#include "tests/testing/local_cluster.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "tests/testing/json_line.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace testing {
namespace {

// Whether a process with this pid exists (ours are reaped, so a gone child is gone).
bool Exists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

std::string WriteSmallJob(const std::string& name) {
  config::Job job;
  job.set_name(name);
  config::Table* table = job.add_tables();
  table->set_name("emb");
  table->set_dim(4);
  job.mutable_cluster()->set_num_shards(8);
  job.mutable_cluster()->set_num_servers(2);
  job.mutable_cluster()->set_num_workers(2);
  const std::string path = TempDir() + "/" + name + ".pbtxt";
  REQUIRE(WriteJobFile(job, path).ok());
  return path;
}

TEST_CASE("a local cluster starts a coordinator and its servers, and terminates them",
          "[local_cluster]") {
  auto cluster = LocalCluster::Start(WriteSmallJob("local_cluster_start"), {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  REQUIRE((*cluster)->servers().size() == 2);
  CHECK(absl::StartsWith((*cluster)->coordinator().address(), "127.0.0.1:"));
  CHECK(Exists((*cluster)->coordinator().pid()));
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
  CHECK_FALSE(Exists((*cluster)->coordinator().pid()));
  for (const auto& server : (*cluster)->servers()) CHECK_FALSE(Exists(server->pid()));
  // Every daemon was stopped, so a second call has none left to stop.
  CHECK((*cluster)->Terminate(absl::Seconds(1)).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a local cluster runs workers with their own flags, and names the first that failed",
          "[local_cluster]") {
  LocalClusterOptions options;
  options.servers = 1;
  auto cluster = LocalCluster::Start(WriteSmallJob("local_cluster_workers"), options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  CHECK((*cluster)->servers().size() == 1);

  // --version makes Abseil's flag parsing print and exit 0 before the worker starts.
  auto ok = (*cluster)->RunWorkers({{"--version"}, {"--version"}}, absl::Seconds(30));
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[1].exit_code == 0);
  CHECK(ResultJson((*ok)[0].stdout_text).empty());

  auto failed = (*cluster)->RunWorkers({{"--version"}, {"--no_such_flag=1"}, {"--no_such_flag=2"}},
                                       absl::Seconds(30));
  CHECK(failed.status().code() == absl::StatusCode::kInternal);
  CHECK(absl::StartsWith(failed.status().message(), "worker 1 exited with 1:\n"));
  CHECK(absl::StrContains(failed.status().message(), "no_such_flag"));

  auto none = (*cluster)->RunWorkers({}, absl::Seconds(30));
  REQUIRE(none.ok());
  CHECK(none->empty());
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

TEST_CASE("a local cluster fails to start on a job its coordinator rejects", "[local_cluster]") {
  const std::string path = TempDir() + "/local_cluster_bad.pbtxt";
  std::ofstream(path) << "this is no job";
  auto cluster = LocalCluster::Start(path, {});
  CHECK(cluster.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("ResultJson is the last RESULT line's JSON", "[local_cluster]") {
  CHECK(ResultJson("") == "");
  CHECK(ResultJson("progress {\"step\":1}\n") == "");
  CHECK(ResultJson("RESULT {\"a\":1}\n") == "{\"a\":1}");
  CHECK(ResultJson("RESULT {\"a\":1}\nprogress\nRESULT {\"a\":2}\n") == "{\"a\":2}");
  CHECK(ResultJson("RESULT {\"a\":3}") == "{\"a\":3}");        // no final newline
  CHECK(ResultJson(" RESULT {\"a\":1}\nRESULTS {}\n") == "");  // only at a line's start
}

TEST_CASE("RunDatagen writes the data and returns ps_datagen's JSON line", "[local_cluster]") {
  DatagenOptions options;
  options.train_path = TempDir() + "/local_cluster_train.tsv";
  options.heldout_path = TempDir() + "/local_cluster_heldout.tsv";
  options.rows = 200;
  options.cardinalities = "10";
  auto json = RunDatagen(options, absl::Seconds(60));
  INFO(json.status().ToString());
  REQUIRE(json.ok());
  CHECK(absl::StartsWith(*json, "{"));
  CHECK(absl::EndsWith(*json, "}"));  // blanks stripped
  CHECK(JsonField(*json, "rows") == 200);
  CHECK(JsonField(*json, "heldout_rows") == 20);  // rows / 10 by default
  const double auc = JsonField(*json, "teacher_auc");
  CHECK(auc > 0.5);
  CHECK(auc <= 1.0);
  const auto lines = [](const std::string& path) {
    std::ifstream in(path);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) ++n;
    return n;
  };
  CHECK(lines(options.train_path) == 200);
  CHECK(lines(options.heldout_path) == 20);

  options.train_path.clear();
  auto failed = RunDatagen(options, absl::Seconds(60));
  CHECK(failed.status().code() == absl::StatusCode::kInternal);
  CHECK(absl::StrContains(failed.status().message(), "ps_datagen exited with 2: "));
  CHECK(absl::StrContains(failed.status().message(), "--out is required"));
}

}  // namespace
}  // namespace testing
}  // namespace ps
