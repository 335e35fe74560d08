// `ps_ctl` against a real cluster (issue 15): a ps_coordinator and two ps_servers on loopback,
// driven through the client library with a skewed key stream (one key in every call), then every
// command that asks the cluster run as the real binary, as text and as --json, and its content
// checked against what was pulled and pushed. Also: a coordinator nobody answers for, and usage
// errors.

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tests/testing/daemon.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ports.h"

namespace ps {
namespace {

constexpr char kPsCtl[] = "client/ps_ctl";
constexpr uint64_t kHotKey = 42;
constexpr int kShards = 16;

std::string JobText() {
  return absl::StrCat(
      R"pb(
        name: "ps_ctl"
        tables {
          name: "emb"
          dim: 8
          optimizer { type: "adagrad" learning_rate: 0.05 initial_accumulator: 0.1 }
        }
        tables {
          name: "wide"
          dim: 1
          optimizer { type: "sgd" learning_rate: 0.1 }
        }
        training { seed: 3 mode: ASYNC }
        cluster { num_shards: 16 num_servers: 2 num_workers: 1 checkpoint_dir: ")pb",
      testing::TempDir(), R"pb(                               /ckpt"
}
      )pb");
}

testing::ProcessResult Ctl(const std::vector<std::string>& args) {
  absl::StatusOr<testing::ProcessResult> result =
      testing::RunProcess(kPsCtl, args, absl::Seconds(60));
  INFO(absl::StrJoin(args, " "));
  REQUIRE(result.ok());
  return *std::move(result);
}

// `text` checked by Python's json.tool, then parsed.
google::protobuf::Struct Json(const std::string& text, const std::string& name) {
  INFO(text);
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".json");
  std::ofstream(path) << text;
  const absl::StatusOr<testing::ProcessResult> tool =
      testing::RunProcess("/usr/bin/python3", {"-m", "json.tool", path});
  REQUIRE(tool.ok());
  INFO(tool->stderr_text);
  CHECK(tool->exit_code == 0);
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(text, &parsed).ok());
  return parsed;
}

const google::protobuf::Value& Get(const google::protobuf::Struct& s, const std::string& name) {
  INFO("field " << name);
  REQUIRE(s.fields().count(name) == 1);
  return s.fields().at(name);
}

// What the test sent, per table, as the servers count it (the client dedupes each call's keys).
struct Sent {
  uint64_t keys_pulled = 0;
  uint64_t keys_pushed = 0;
  std::set<uint64_t> distinct;
};

// One "step": pull the call's keys of `emb`, push a gradient for them, report the clock.
void Step(Client& client, CoordinatorClient& coordinator, const std::vector<uint64_t>& keys,
          int64_t clock) {
  std::vector<float> rows(keys.size() * 8);
  REQUIRE(client.Pull("emb", keys, absl::MakeSpan(rows)).ok());
  const std::vector<float> grads(keys.size() * 8, 0.01f);
  REQUIRE(client.Push("emb", keys, grads).ok());
  REQUIRE(coordinator.ReportClock(client.worker_id(), clock).ok());
}


// Prints a command's text output, for client/README.md's samples.
void Show(const std::string& command, const testing::ProcessResult& result) {
  std::cout << "$ ps_ctl " << command << "\n" << result.stdout_text << result.stderr_text << "\n";
}

TEST_CASE("ps_ctl shows a real cluster: status, shards, tables, hot keys, metrics, checkpoint",
          "[integration][ps_ctl]") {
  auto coordinator_daemon = testing::StartCoordinator(JobText(), "ps_ctl_job");
  REQUIRE(coordinator_daemon.ok());
  const std::string address = (*coordinator_daemon)->address();
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  for (int i = 0; i < 2; ++i) {
    // Every key counted into the hot keys, so that their counts are exact (default: 1 in 128).
    auto server = testing::Daemon::Start("server/ps_server",
                                         {"--coordinator=" + address, "--hot_keys_sample_every=1"});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    servers.push_back(std::move(*server));
  }
  ClientOptions options;
  options.coordinator = address;
  options.connect_timeout = absl::Seconds(30);
  options.role = rpc::WORKER;
  options.rank = 0;
  auto client = Client::Connect(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  auto coordinator = CoordinatorClient::Connect(address, absl::Seconds(10));
  REQUIRE(coordinator.ok());

  // 1000 steps of 21 distinct keys each: the hot key, and 20 from a wide range. Then one pull
  // of 100 keys of "wide".
  std::mt19937_64 rng(5);
  std::vector<std::vector<uint64_t>> calls;
  Sent emb;
  for (int i = 0; i < 1000; ++i) {
    std::set<uint64_t> keys = {kHotKey};
    while (keys.size() < 21) keys.insert(1000 + rng() % 1000000);
    calls.emplace_back(keys.begin(), keys.end());
    emb.keys_pulled += keys.size();
    emb.keys_pushed += keys.size();
    emb.distinct.insert(keys.begin(), keys.end());
  }
  for (size_t i = 0; i < calls.size(); ++i) Step(**client, **coordinator, calls[i], i);
  std::vector<uint64_t> wide_keys(100);
  for (size_t i = 0; i < wide_keys.size(); ++i) wide_keys[i] = 5 * i;
  std::vector<float> wide_rows(wide_keys.size());
  REQUIRE((*client)->Pull("wide", wide_keys, absl::MakeSpan(wide_rows)).ok());

  const std::string flag = "--coordinator=" + address;

  {  // status: the coordinator's view and every server's figures
    const testing::ProcessResult text = Ctl({"status", flag});
    INFO(text.stdout_text << text.stderr_text);
    Show("status", text);
    CHECK(text.exit_code == 0);
    CHECK_THAT(text.stdout_text, Catch::Contains("job \"ps_ctl\", coordinator " + address));
    CHECK_THAT(text.stdout_text, Catch::Contains("server 0: "));
    CHECK_THAT(text.stdout_text, Catch::Contains("server 1: "));
    CHECK_THAT(text.stdout_text, Catch::Contains("optimizer adagrad"));
    CHECK_THAT(text.stdout_text, Catch::Contains("clocks: steps done: slowest worker 1000"));
    const testing::ProcessResult json = Ctl({"status", flag, "--json"});
    CHECK(json.exit_code == 0);
    const auto parsed = Json(json.stdout_text, "status");
    CHECK(Get(parsed, "coordinator").string_value() == address);
    CHECK(Get(Get(parsed, "cluster").struct_value(), "job_name").string_value() == "ps_ctl");
    const auto& replies = Get(Get(parsed, "servers").struct_value(), "servers").list_value();
    REQUIRE(replies.values_size() == 2);
    for (const auto& reply : replies.values()) {
      const auto& status = Get(reply.struct_value(), "status").struct_value();
      CHECK(Get(status, "tables").list_value().values_size() == 2);
    }
  }

  {  // shards: every shard once, the primaries' rows adding up to the rows pulled
    const testing::ProcessResult text = Ctl({"shards", flag});
    INFO(text.stdout_text << text.stderr_text);
    Show("shards", text);
    CHECK(text.exit_code == 0);
    CHECK_THAT(text.stdout_text, Catch::Contains("16 shards, 2 servers"));
    std::set<int> rows_seen;
    for (absl::string_view line : absl::StrSplit(text.stdout_text, '\n')) {
      const std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
      int shard = -1;
      // A shard's line: its id, its primary's id, ..., the bytes as "12.3 kB" (8 cells); the
      // servers' lines have an address second.
      int primary = -1;
      if (cells.size() == 8 && absl::SimpleAtoi(cells[0], &shard) &&
          absl::SimpleAtoi(cells[1], &primary)) {
        rows_seen.insert(shard);
      }
    }
    CHECK(rows_seen.size() == kShards);
    const testing::ProcessResult json = Ctl({"shards", flag, "--json"});
    CHECK(json.exit_code == 0);
    const auto parsed = Json(json.stdout_text, "shards");
    const auto& shards = Get(parsed, "shards").list_value();
    REQUIRE(shards.values_size() == kShards);
    double rows = 0;
    for (int i = 0; i < kShards; ++i) {
      const auto& shard = shards.values(i).struct_value();
      CHECK(Get(shard, "shard").number_value() == i);
      CHECK_FALSE(Get(shard, "lost").bool_value());
      rows += Get(shard, "rows").number_value();
    }
    CHECK(rows == emb.distinct.size() + wide_keys.size());
    CHECK(Get(parsed, "servers").list_value().values_size() == 2);
    CHECK(Get(parsed, "servers_failed").list_value().values_size() == 0);
  }

  {  // tables: rows as pulled, keys as sent
    const testing::ProcessResult text = Ctl({"tables", flag});
    INFO(text.stdout_text << text.stderr_text);
    Show("tables", text);
    CHECK(text.exit_code == 0);
    CHECK_THAT(text.stdout_text, Catch::Contains("tables over 2 of 2 servers"));
    CHECK_THAT(text.stdout_text,
               Catch::Contains(absl::StrCat("emb    8    adagrad    ", emb.distinct.size(), " ")));
    const testing::ProcessResult json = Ctl({"tables", flag, "--json"});
    Show("tables --json", json);
    CHECK(json.exit_code == 0);
    const auto parsed = Json(json.stdout_text, "tables");
    const auto& tables = Get(parsed, "tables").list_value();
    REQUIRE(tables.values_size() == 2);
    const auto& e = tables.values(0).struct_value();
    CHECK(Get(e, "name").string_value() == "emb");
    CHECK(Get(e, "dim").number_value() == 8);
    CHECK(Get(e, "optimizer").string_value() == "adagrad");
    CHECK(Get(e, "rows").number_value() == emb.distinct.size());
    CHECK(Get(e, "rows_all_copies").number_value() == emb.distinct.size());
    CHECK(Get(e, "keys_pulled").number_value() == emb.keys_pulled);
    CHECK(Get(e, "keys_pushed").number_value() == emb.keys_pushed);
    CHECK(Get(e, "bytes").number_value() > emb.distinct.size() * 16 * sizeof(float));
    const auto& w = tables.values(1).struct_value();
    CHECK(Get(w, "name").string_value() == "wide");
    CHECK(Get(w, "optimizer").string_value() == "sgd");
    CHECK(Get(w, "rows").number_value() == wide_keys.size());
    CHECK(Get(w, "keys_pulled").number_value() == wide_keys.size());
    CHECK(Get(w, "keys_pushed").number_value() == 0);
  }

  {  // hotkeys: the key in every call comes first, each way
    const testing::ProcessResult text = Ctl({"hotkeys", flag, "--table=emb", "--k=5"});
    INFO(text.stdout_text << text.stderr_text);
    Show("hotkeys --table=emb --k=5", text);
    CHECK(text.exit_code == 0);
    CHECK_THAT(text.stdout_text, Catch::Contains("hot keys of table \"emb\""));
    CHECK_THAT(text.stdout_text, Catch::Contains(absl::StrCat("  1     ", kHotKey, "  ")));
    const testing::ProcessResult json = Ctl({"hotkeys", flag, "--table=emb", "--json"});
    CHECK(json.exit_code == 0);
    const auto parsed = Json(json.stdout_text, "hotkeys");
    CHECK(Get(parsed, "keys_pulled").number_value() == emb.keys_pulled);
    CHECK(Get(parsed, "sample_every").number_value() == 1);
    for (const char* direction : {"pulled", "pushed"}) {
      INFO(direction);
      const auto& keys = Get(parsed, direction).list_value();
      REQUIRE(keys.values_size() == 10);
      const auto& top = keys.values(0).struct_value();
      CHECK(Get(top, "id").number_value() == kHotKey);
      // In every one of the 1000 calls, counted on its server exactly (error 0 there); the other
      // server's bound for a key it does not list is in count and error alike.
      const double count = Get(top, "count").number_value();
      CHECK(count - Get(top, "error").number_value() == 1000);
      CHECK(count >= 1000);
      CHECK(Get(keys.values(1).struct_value(), "count").number_value() < count / 3);
    }
    // An unknown table: the coordinator's NOT_FOUND; a bad k: usage.
    const testing::ProcessResult unknown = Ctl({"hotkeys", flag, "--table=nope"});
    CHECK(unknown.exit_code == 1);
    CHECK_THAT(unknown.stderr_text,
               Catch::Contains(absl::StrCat("ps_ctl hotkeys: coordinator ", address,
                                            ": NOT_FOUND: no table \"nope\"")));
    CHECK(Ctl({"hotkeys", flag, "--table=emb", "--k=300"}).exit_code == 2);
    CHECK(Ctl({"hotkeys", flag}).exit_code == 2);
  }

  {  // metrics: rates while a client keeps stepping, and the worker's steps
    std::atomic<bool> stop{false};
    std::atomic<int64_t> clock{static_cast<int64_t>(calls.size())};
    std::thread load([&] {
      for (size_t i = 0; !stop.load(); ++i) {
        Step(**client, **coordinator, calls[i % calls.size()], clock++);
      }
    });
    const testing::ProcessResult json = Ctl({"metrics", flag, "--interval_s=1", "--json"});
    const testing::ProcessResult text = Ctl({"metrics", flag, "--interval_s=1"});
    stop = true;
    load.join();
    INFO(json.stdout_text << json.stderr_text << text.stdout_text << text.stderr_text);
    Show("metrics --interval_s=1", text);
    CHECK(json.exit_code == 0);
    CHECK(text.exit_code == 0);
    const auto parsed = Json(json.stdout_text, "metrics");
    CHECK(Get(parsed, "interval_s").number_value() >= 1.0);
    const auto& total = Get(parsed, "total").struct_value();
    CHECK(Get(total, "keys_pulled_per_s").number_value() > 0);
    CHECK(Get(total, "keys_pushed_per_s").number_value() > 0);
    CHECK(Get(total, "pull_requests_per_s").number_value() > 0);
    CHECK(Get(total, "rows").number_value() == emb.distinct.size() + wide_keys.size());
    const auto& servers = Get(parsed, "servers").list_value();
    REQUIRE(servers.values_size() == 2);
    for (const auto& s : servers.values()) CHECK(Get(s.struct_value(), "measured").bool_value());
    const auto& workers = Get(parsed, "workers").list_value();
    REQUIRE(workers.values_size() == 1);
    CHECK(Get(workers.values(0).struct_value(), "steps_per_s").number_value() > 0);
    CHECK(Get(workers.values(0).struct_value(), "state").string_value() == "training");
    CHECK_THAT(text.stdout_text, Catch::Contains("keys pulled/s"));
    CHECK_THAT(text.stdout_text, Catch::Contains("  total"));
  }

  {  // checkpoint, as text and as JSON
    const testing::ProcessResult text = Ctl({"checkpoint", flag});
    INFO(text.stdout_text << text.stderr_text);
    Show("checkpoint", text);
    CHECK(text.exit_code == 0);
    CHECK_THAT(text.stdout_text, Catch::StartsWith("checkpoint 1 at "));
    const testing::ProcessResult json = Ctl({"checkpoint", flag, "--json"});
    CHECK(json.exit_code == 0);
    const auto parsed = Json(json.stdout_text, "checkpoint");
    CHECK(Get(parsed, "id").string_value() == "2");  // protobuf writes uint64 as a string
    CHECK_THAT(Get(parsed, "path").string_value(), Catch::EndsWith("00000000000000000002"));
  }

  client->reset();  // leaves the job
  for (auto& server : servers) CHECK(server->Terminate(absl::Seconds(20)).ok());
  CHECK((*coordinator_daemon)->Terminate(absl::Seconds(20)).ok());
}

TEST_CASE("ps_ctl names an unreachable coordinator and fails within seconds",
          "[integration][ps_ctl]") {
  testing::RefusingPort port;
  for (const char* command : {"status", "shards", "tables", "metrics", "checkpoint"}) {
    INFO(command);
    const absl::Time start = absl::Now();
    const testing::ProcessResult result = Ctl({command, "--coordinator=" + port.address()});
    const absl::Duration took = absl::Now() - start;
    INFO(result.stdout_text << result.stderr_text);
    CHECK(result.exit_code == 1);
    CHECK_THAT(result.stderr_text,
               Catch::StartsWith(absl::StrCat("ps_ctl ", command, ": coordinator ", port.address(),
                                              ": UNAVAILABLE: ")));
    CHECK(took < absl::Seconds(10));
  }
  const testing::ProcessResult hot =
      Ctl({"hotkeys", "--coordinator=" + port.address(), "--table=emb", "--json"});
  CHECK(hot.exit_code == 1);
  CHECK(hot.stdout_text.empty());
}

TEST_CASE("ps_ctl refuses usage errors with status 2", "[integration][ps_ctl]") {
  CHECK(Ctl({"shards"}).exit_code == 2);  // no --coordinator
  CHECK(Ctl({"metrics", "--coordinator=127.0.0.1:1", "--interval_s=0"}).exit_code == 2);
  CHECK(Ctl({"checkpoint", "list", "/nowhere", "--json"}).exit_code == 2);
  CHECK(Ctl({"nonsense"}).exit_code == 2);
}

}  // namespace
}  // namespace ps
