// A cluster with mutual TLS and bearer tokens on every channel (coordinator, servers, the
// replication stream between them, checkpoints, the status fan-out, workers, ps_ctl), made with
// deploy/make_credentials.sh: the quickstart job trains to its usual AUC while ps_ctl calls that
// must be refused are, each with its own error, and the legitimate workers carry on.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "tests/testing/credentials.h"
#include "tests/testing/daemon.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

int CountOf(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST_CASE("with mutual TLS and tokens on every channel the quickstart job trains to its usual "
          "AUC, and every refusal is named",
          "[integration][security]") {
  const std::string dir = testing::TempDir();
  const absl::StatusOr<testing::TestCredentials> made = testing::MakeTestCredentials(dir);
  INFO(made.status().ToString());
  REQUIRE(made.ok());
  const testing::TestCredentials& c = *made;

  testing::DatagenOptions data;
  data.train_path = absl::StrCat(dir, "/train.tsv");
  data.heldout_path = absl::StrCat(dir, "/heldout.tsv");
  // The quickstart's rows: its usual AUC is within 0.02 of the teacher's (0.804 and 0.817).
  data.rows = 1000000;
  data.heldout_rows = 30000;
  const absl::StatusOr<std::string> teacher = testing::RunDatagen(data, absl::Minutes(2));
  INFO(teacher.status().ToString());
  REQUIRE(teacher.ok());
  const double teacher_auc = testing::JsonField(*teacher, "teacher_auc");
  absl::StatusOr<config::Job> job = testing::LoadJobOnData(
      "deploy/jobs/quickstart.pbtxt", data.train_path, data.heldout_path, /*servers=*/2,
      /*workers=*/2);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  // Every channel: copies of each shard on both servers (the replication stream), and a
  // checkpoint at the end (the coordinator's calls to the servers, worker 0's to the coordinator).
  job->mutable_cluster()->set_replication_factor(2);
  job->mutable_cluster()->set_checkpoint_dir(absl::StrCat(dir, "/checkpoints"));
  job->mutable_cluster()->set_checkpoint_at_end(true);
  const std::string job_path = absl::StrCat(dir, "/job.pbtxt");
  REQUIRE(testing::WriteJobFile(*job, job_path).ok());

  const std::vector<std::string> daemon_flags = {
      absl::StrCat("--tls_cert=", c.node_cert), absl::StrCat("--tls_key=", c.node_key),
      absl::StrCat("--tls_ca=", c.ca), absl::StrCat("--token_file=", c.tokens)};
  testing::LocalClusterOptions options;
  options.server_args = daemon_flags;
  options.coordinator_args = daemon_flags;
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string coordinator =
      absl::StrCat("--coordinator=127.0.0.1:", (*cluster)->coordinator().port());

  absl::StatusOr<std::vector<testing::ProcessResult>> results;
  std::thread workers([&] {
    const std::vector<std::string> worker_flags = {
        "--progress_s=2", absl::StrCat("--tls_cert=", c.client_cert),
        absl::StrCat("--tls_key=", c.client_key), absl::StrCat("--tls_ca=", c.ca),
        absl::StrCat("--token_file=", c.worker_token)};
    results = (*cluster)->RunWorkers({worker_flags, worker_flags}, absl::Minutes(8));
  });

  // ps_ctl shards: the coordinator asks every server (the status fan-out) with its admin token.
  auto ctl = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"shards", coordinator, "--timeout_ms=10000"});
    absl::StatusOr<testing::ProcessResult> run = testing::RunProcess("client/ps_ctl", flags);
    REQUIRE(run.ok());
    std::printf("ps_ctl %s\n  exit %d; stderr: %s\n", absl::StrJoin(flags, " ").c_str(),
                run->exit_code, run->stderr_text.c_str());
    return *run;
  };
  const std::string client_cert = absl::StrCat("--tls_cert=", c.client_cert);
  const std::string client_key = absl::StrCat("--tls_key=", c.client_key);
  const std::string ca = absl::StrCat("--tls_ca=", c.ca);
  const std::string admin_token = absl::StrCat("--token_file=", c.tokens);

  const testing::ProcessResult admin = ctl({client_cert, client_key, ca, admin_token});
  CHECK(admin.exit_code == 0);
  CHECK(absl::StrContains(admin.stdout_text, "127.0.0.1"));

  const testing::ProcessResult worker_token =
      ctl({client_cert, client_key, ca, absl::StrCat("--token_file=", c.worker_token)});
  CHECK(worker_token.exit_code == 1);
  CHECK(absl::StrContains(worker_token.stderr_text,
                          "PERMISSION_DENIED: /ps.rpc.Coordinator/GetStatus needs an admin token; "
                          "this call came with a worker token"));

  const std::string wrong_tokens = absl::StrCat(dir, "/wrong_tokens");
  std::ofstream(wrong_tokens) << "admin 0123456789abcdef0123456789abcdef\n";
  const testing::ProcessResult wrong_token =
      ctl({client_cert, client_key, ca, absl::StrCat("--token_file=", wrong_tokens)});
  CHECK(wrong_token.exit_code == 1);
  CHECK(absl::StrContains(wrong_token.stderr_text,
                          "UNAUTHENTICATED: the bearer token is not accepted by this server"));
  // The same peer refused again is not logged again.
  ctl({client_cert, client_key, ca, absl::StrCat("--token_file=", wrong_tokens)});

  const testing::ProcessResult no_token = ctl({client_cert, client_key, ca});
  CHECK(no_token.exit_code == 1);
  CHECK(absl::StrContains(no_token.stderr_text,
                          "UNAUTHENTICATED: this server needs a bearer token (--token_file)"));

  // Refused in the TLS handshake: the client sees UNAVAILABLE, with what to check.
  const std::string tls_hint = "this process dials with TLS: the server must serve TLS";
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {ca, admin_token},  // no client certificate
           {absl::StrCat("--tls_cert=", c.stranger_cert), absl::StrCat("--tls_key=", c.stranger_key),
            ca, admin_token},  // a certificate of another CA
           {absl::StrCat("--tls_cert=", c.expired_cert), absl::StrCat("--tls_key=", c.expired_key),
            ca, admin_token},  // an expired certificate
       }) {
    const testing::ProcessResult refused = ctl(flags);
    CHECK(refused.exit_code == 1);
    CHECK(absl::StrContains(refused.stderr_text, "UNAVAILABLE"));
    CHECK(absl::StrContains(refused.stderr_text, tls_hint));
  }
  const testing::ProcessResult plaintext = ctl({});
  CHECK(plaintext.exit_code == 1);
  CHECK(absl::StrContains(plaintext.stderr_text, "UNAVAILABLE"));
  CHECK(absl::StrContains(plaintext.stderr_text,
                          "this process dials in plaintext: a cluster that serves TLS needs "
                          "--tls_ca here"));
  // A token file without TLS never leaves the process.
  const testing::ProcessResult token_in_plaintext = ctl({admin_token});
  CHECK(token_in_plaintext.exit_code == 2);
  CHECK(absl::StrContains(token_in_plaintext.stderr_text, "needs TLS"));

  workers.join();
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  const std::string result_line = testing::ResultJson((*results)[0].stdout_text);
  std::printf("worker 0: %s\nteacher AUC %.6f\n", result_line.c_str(), teacher_auc);
  INFO("worker 0: " << result_line << "\nteacher AUC " << teacher_auc);
  const double auc = testing::JsonField(result_line, "heldout_auc");
  CHECK(auc > teacher_auc - 0.02);
  CHECK(auc <= teacher_auc + 0.01);
  CHECK_FALSE(absl::StrContains(result_line, "\"checkpoint\":\"\""));

  // The coordinator logged each refused peer once, naming it by its certificate, never a token.
  const std::string log = (*cluster)->coordinator().ReadLog();
  std::printf("coordinator log:\n%s\n", log.c_str());
  CHECK(absl::StrContains(log, "gRPC security: mutual TLS"));
  CHECK(CountOf(log, "refused peer with certificate \"CN=parameter-server client\" (a token "
                     "that is not in --token_file") == 1);
  CHECK(CountOf(log, "with a worker token calling /ps.rpc.Coordinator/GetStatus") == 1);
  CHECK(CountOf(log, "(no token;") == 1);
  CHECK_FALSE(absl::StrContains(log, "0123456789abcdef0123456789abcdef"));
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace ps
