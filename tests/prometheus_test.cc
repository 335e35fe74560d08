// A real Prometheus (Debian's prometheus package) scrapes a real cluster: a ps_coordinator, two
// ps_server and two ps_worker processes on loopback, each serving /metrics. The test trains a
// short job and then asks Prometheus's HTTP API whether the series exist and moved as the job
// did: the servers' pushed keys rose while it ran, every server reports its rows, the workers'
// last step is the one their RESULT line gives, and every expression of the Grafana dashboard
// (deploy/grafana) evaluates.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/ports.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0);  // Prometheus never reads half of it
}

// Prometheus's HTTP API on 127.0.0.1.
class PrometheusApi {
 public:
  explicit PrometheusApi(int port) : client_("127.0.0.1", port) {
    client_.set_read_timeout(10, 0);
  }

  bool Ready() {
    auto response = client_.Get("/-/ready");
    return response && response->status == 200;
  }

  // The `data` of a successful answer to `path` with `params`; an empty Struct (and the error in
  // *error) otherwise.
  Struct Get(const std::string& path, const httplib::Params& params, std::string* error) {
    auto response = client_.Get(path.c_str(), params, httplib::Headers());
    Struct answer;
    if (!response) {
      *error = "no answer from Prometheus";
      return Struct();
    }
    if (!google::protobuf::util::JsonStringToMessage(response->body, &answer).ok()) {
      *error = "not JSON: " + response->body;
      return Struct();
    }
    const auto& fields = answer.fields();
    if (fields.count("status") == 0 || fields.at("status").string_value() != "success") {
      *error = response->body;
      return Struct();
    }
    error->clear();
    return fields.at("data").struct_value();
  }

  // An instant query's result vector (each element: "metric" and "value": [time, "number"]).
  ListValue Query(const std::string& query, std::string* error) {
    return Get("/api/v1/query", {{"query", query}}, error).fields().at("result").list_value();
  }

 private:
  httplib::Client client_;
};

double SampleValue(const Value& sample) {
  double value = std::nan("");
  const ListValue& pair = sample.struct_value().fields().at("value").list_value();
  if (!absl::SimpleAtod(pair.values(1).string_value(), &value)) return std::nan("");
  return value;
}

std::string Label(const Value& sample, const std::string& name) {
  const auto& metric = sample.struct_value().fields().at("metric").struct_value().fields();
  const auto it = metric.find(name);
  return it == metric.end() ? "" : it->second.string_value();
}

TEST_CASE("a real Prometheus scrapes every daemon of a training job, and the series move with it",
          "[integration][prometheus]") {
  const std::string dir = testing::TempDir();
  testing::DatagenOptions data;
  data.train_path = absl::StrCat(dir, "/train.tsv");
  data.heldout_path = absl::StrCat(dir, "/heldout.tsv");
  data.rows = 200000;
  data.heldout_rows = 5000;
  const absl::StatusOr<std::string> teacher = testing::RunDatagen(data, absl::Minutes(2));
  INFO(teacher.status().ToString());
  REQUIRE(teacher.ok());
  absl::StatusOr<config::Job> job = testing::LoadJobOnData(
      "deploy/jobs/quickstart.pbtxt", data.train_path, data.heldout_path, /*servers=*/2,
      /*workers=*/2);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  job->mutable_training()->set_epochs(2);
  const std::string job_path = absl::StrCat(dir, "/job.pbtxt");
  REQUIRE(testing::WriteJobFile(*job, job_path).ok());

  testing::LocalClusterOptions options;
  options.server_args = {"--metrics_listen=127.0.0.1:0"};
  options.coordinator_args = {"--metrics_listen=127.0.0.1:0"};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  // Each prints its metrics port before it writes its RPC port file, which Start waited for.
  std::vector<std::string> servers;
  for (const auto& server : (*cluster)->servers()) {
    const int port = testing::MetricsPortInLog(server->ReadLog());
    REQUIRE(port > 0);
    servers.push_back(absl::StrCat("'127.0.0.1:", port, "'"));
  }
  const int coordinator_port = testing::MetricsPortInLog((*cluster)->coordinator().ReadLog());
  REQUIRE(coordinator_port > 0);

  // Workers are scraped from a file of targets that Prometheus watches, written once their ports
  // are known.
  const std::string workers_file = absl::StrCat(dir, "/workers.json");
  WriteFile(workers_file, "[]");
  const std::string config_path = absl::StrCat(dir, "/prometheus.yml");
  WriteFile(config_path, absl::StrCat(R"(global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ps_coordinator
    static_configs: [{targets: ['127.0.0.1:)",
                                      coordinator_port, R"(']}]
  - job_name: ps_server
    static_configs: [{targets: [)",
                                      absl::StrJoin(servers, ", "), R"(]}]
  - job_name: ps_worker
    file_sd_configs: [{files: [')",
                                      workers_file, R"('], refresh_interval: 1s}]
)"));
  const int prometheus_port = testing::FreeLoopbackPort();
  auto prometheus = testing::Daemon::Launch(
      "/usr/bin/prometheus",
      {absl::StrCat("--config.file=", config_path),
       absl::StrCat("--storage.tsdb.path=", dir, "/tsdb"),
       absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port)});
  REQUIRE(prometheus.ok());
  PrometheusApi api(prometheus_port);
  const bool ready = testing::Eventually([&] { return api.Ready(); }, absl::Seconds(60),
                                         absl::Milliseconds(100));
  INFO((*prometheus)->ReadLog());
  REQUIRE(ready);

  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<testing::ProcessResult>> results;
  std::thread workers([&] {
    std::vector<std::vector<std::string>> args;
    for (int rank = 0; rank < 2; ++rank) {
      args.push_back({"--metrics_listen=127.0.0.1:0",
                      absl::StrCat("--metrics_port_file=", dir, "/worker", rank, ".port"),
                      // Each worker waits for one scrape after its last step.
                      "--metrics_final_scrape_s=30", "--progress_s=1"});
    }
    results = (*cluster)->RunWorkers(args, absl::Minutes(5));
  });
  std::vector<std::string> worker_targets;
  const bool ports = testing::Eventually(
      [&] {
        worker_targets.clear();
        for (int rank = 0; rank < 2; ++rank) {
          int port = 0;
          const std::string text = ReadFile(absl::StrCat(dir, "/worker", rank, ".port"));
          if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port)) return false;
          worker_targets.push_back(absl::StrCat("\"127.0.0.1:", port, "\""));
        }
        return true;
      },
      absl::Seconds(60), absl::Milliseconds(20));
  if (ports) {
    WriteFile(workers_file,
              absl::StrCat("[{\"targets\": [", absl::StrJoin(worker_targets, ", "), "]}]"));
  }
  workers.join();
  REQUIRE(ports);
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  const absl::Time end = absl::Now();
  std::map<std::string, int64_t> result_steps;  // by rank
  for (int rank = 0; rank < 2; ++rank) {
    const std::string result = testing::ResultJson((*results)[rank].stdout_text);
    REQUIRE(!result.empty());
    result_steps[absl::StrCat(rank)] =
        static_cast<int64_t>(testing::JsonField(result, "steps"));
  }
  std::string error;

  {  // every daemon was scraped, and the coordinator counted its members
    ListValue up = api.Query("up", &error);
    INFO(error);
    CHECK(up.values_size() == 5);
    for (const Value& target : up.values()) {
      INFO(Label(target, "job") << " " << Label(target, "instance"));
      CHECK(SampleValue(target) >= 0);
    }
    ListValue servers_alive =
        api.Query("ps_coordinator_members{role=\"server\",state=\"alive\"}", &error);
    REQUIRE(servers_alive.values_size() == 1);
    CHECK(SampleValue(servers_alive.values(0)) == 2);
    ListValue pulls = api.Query("ps_server_rpcs_total{method=\"Pull\",code=\"OK\"}", &error);
    CHECK(pulls.values_size() == 2);
  }

  {  // the servers' pushed keys rose while the job ran
    const Struct range = api.Get(
        "/api/v1/query_range",
        {{"query", "sum by (instance) (ps_server_keys_pushed_total)"},
         {"start", absl::StrCat(absl::ToUnixSeconds(start) - 2)},
         {"end", absl::StrCat(absl::ToUnixSeconds(end) + 2)},
         {"step", "1"}},
        &error);
    INFO(error);
    const ListValue& series = range.fields().at("result").list_value();
    REQUIRE(series.values_size() == 2);
    for (const Value& one : series.values()) {
      const ListValue& values = one.struct_value().fields().at("values").list_value();
      std::vector<double> points;
      for (const Value& point : values.values()) {
        double v = 0;
        REQUIRE(absl::SimpleAtod(point.list_value().values(1).string_value(), &v));
        points.push_back(v);
      }
      INFO(Label(one, "instance") << ": " << absl::StrJoin(points, ", "));
      REQUIRE(points.size() >= 3);
      for (size_t i = 1; i < points.size(); ++i) CHECK(points[i] >= points[i - 1]);
      // Seen at more than two values: it moved during the job, not only from zero to the end.
      std::vector<double> distinct(points);
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      CHECK(distinct.size() >= 3);
      CHECK(points.back() > points.front());
    }
  }

  {  // every server reports its rows and bytes
    ListValue rows = api.Query("ps_server_rows", &error);
    INFO(error);
    REQUIRE(rows.values_size() == 2);
    for (const Value& server : rows.values()) {
      CHECK(Label(server, "table") == "emb");
      CHECK(SampleValue(server) > 100);
    }
    CHECK(api.Query("ps_server_memory_bytes > 0", &error).values_size() == 2);
  }

  {  // each worker's last scraped step is the one its RESULT gives
    ListValue steps = api.Query("max_over_time(ps_worker_step[10m])", &error);
    INFO(error);
    REQUIRE(steps.values_size() == 2);
    for (const Value& worker : steps.values()) {
      const std::string rank = Label(worker, "rank");
      INFO("rank " << rank);
      REQUIRE(result_steps.count(rank) == 1);
      CHECK(SampleValue(worker) == result_steps[rank]);
    }
    // Over the run: a worker that exited is marked stale at once by the next failed scrape.
    CHECK(api.Query("max_over_time(ps_worker_pull_duration_seconds_count[10m]) > 0", &error)
              .values_size() == 2);
    CHECK(api.Query("max_over_time(ps_worker_auc[10m]) > 0.5", &error).values_size() == 2);
  }

  {  // every expression of the Grafana dashboard evaluates
    absl::StatusOr<testing::ProcessResult> exprs =
        testing::RunProcess("/usr/bin/python3",
                            {"deploy/grafana/dashboard_check.py", "--exprs",
                             "deploy/grafana/parameter_server.json"},
                            absl::Seconds(60));
    REQUIRE(exprs.ok());
    INFO(exprs->stderr_text);
    REQUIRE(exprs->exit_code == 0);
    int evaluated = 0;
    int with_data = 0;
    for (absl::string_view line : absl::StrSplit(exprs->stdout_text, '\n', absl::SkipEmpty())) {
      const ListValue result = api.Query(std::string(line), &error);
      INFO(line << ": " << error);
      CHECK(error.empty());
      ++evaluated;
      with_data += result.values_size() > 0 ? 1 : 0;
    }
    CHECK(evaluated >= 20);
    // Replication lag and checkpoints have no series in this job; nearly all others do.
    CHECK(with_data >= evaluated / 2);
    std::printf("dashboard: %d expressions evaluated, %d with data\n", evaluated, with_data);
  }

  CHECK((*cluster)->Terminate(absl::Seconds(30)).ok());
}

}  // namespace
}  // namespace ps
