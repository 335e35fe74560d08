#include "tests/testing/local_cluster.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/job_config.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/testing/json_line.h"

namespace ps {
namespace testing {
namespace {

// `binary` (a path in the workspace) under `bin_dir`, or as is when that is "".
std::string BinaryPath(const std::string& bin_dir, absl::string_view binary) {
  return bin_dir.empty() ? std::string(binary) : absl::StrCat(bin_dir, "/", binary);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const std::string& job_path, const LocalClusterOptions& options) {
  if (options.coordinators < 1 || (options.coordinators > 1 && options.etcd.empty())) {
    return absl::InvalidArgumentError("LocalCluster: coordinators must be 1, or more with etcd");
  }
  std::vector<std::string> coordinator_args = {"--job=" + job_path};
  if (!options.etcd.empty()) coordinator_args.push_back("--etcd=" + options.etcd);
  coordinator_args.insert(coordinator_args.end(), options.coordinator_args.begin(),
                          options.coordinator_args.end());
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(options.bin_dir, coordinator_args));
  for (int i = 0; i < options.coordinators; ++i) {
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<Daemon> coordinator,
        Daemon::Start(BinaryPath(options.bin_dir, "server/coordinator/ps_coordinator"),
                      coordinator_args));
    cluster->coordinator_ports_.push_back(coordinator->port());
    cluster->coordinators_.push_back(std::move(coordinator));
  }
  std::vector<std::string> server_args = {"--coordinator=" + cluster->coordinator_addresses()};
  server_args.insert(server_args.end(), options.server_args.begin(), options.server_args.end());
  for (int i = 0; i < options.servers; ++i) {
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<Daemon> server,
        Daemon::Start(BinaryPath(options.bin_dir, "server/ps_server"), server_args));
    cluster->servers_.push_back(std::move(server));
  }
  return cluster;
}

absl::Status LocalCluster::RestartCoordinator() { return RestartCoordinator(0); }

std::string LocalCluster::coordinator_addresses() const {
  std::vector<std::string> addresses;
  for (int port : coordinator_ports_) addresses.push_back(absl::StrCat("127.0.0.1:", port));
  return absl::StrJoin(addresses, ",");
}

std::optional<rpc::ClusterStatus> LocalCluster::StatusFrom(size_t i,
                                                           absl::Duration timeout) const {
  if (coordinators_[i] == nullptr) return std::nullopt;
  auto stub = rpc::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", coordinator_ports_[i]), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  rpc::ClusterStatus status;
  if (!stub->GetStatus(&context, rpc::StatusRequest(), &status).ok()) return std::nullopt;
  return status;
}

int LocalCluster::LeaderIndex(absl::Duration timeout) const {
  for (size_t i = 0; i < coordinator_ports_.size(); ++i) {
    if (StatusFrom(i, timeout).has_value()) return static_cast<int>(i);
  }
  return -1;
}

std::optional<rpc::ClusterStatus> LocalCluster::LeaderStatus(absl::Duration timeout) const {
  for (size_t i = 0; i < coordinator_ports_.size(); ++i) {
    std::optional<rpc::ClusterStatus> status = StatusFrom(i, timeout);
    if (status.has_value()) return status;
  }
  return std::nullopt;
}

void LocalCluster::KillCoordinator(int i) {
  if (coordinators_[i] == nullptr) return;
  coordinators_[i]->Kill();
  coordinators_[i].reset();
}

absl::Status LocalCluster::RestartCoordinator(int i) {
  KillCoordinator(i);
  std::vector<std::string> args = coordinator_args_;
  args.push_back(absl::StrCat("--listen=127.0.0.1:", coordinator_ports_[i]));
  PS_ASSIGN_OR_RETURN(
      coordinators_[i],
      Daemon::Start(BinaryPath(bin_dir_, "server/coordinator/ps_coordinator"), args));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ProcessResult>> LocalCluster::RunWorkers(
    const std::vector<std::vector<std::string>>& worker_args, absl::Duration timeout) {
  const int workers = static_cast<int>(worker_args.size());
  const std::string binary = BinaryPath(bin_dir_, "worker/ps_worker");
  std::vector<absl::StatusOr<ProcessResult>> results(workers, absl::UnknownError("not run"));
  {
    // Each worker's process dies with the thread that started it (RunProcess), so each thread
    // lives until its worker has exited.
    std::vector<std::thread> threads;
    for (int rank = 0; rank < workers; ++rank) {
      // The workers share this machine: each gets its share of the cores for its matrix
      // products (worker_args may say otherwise: the last flag wins).
      std::vector<std::string> args = {
          "--coordinator=" + coordinator_addresses(), absl::StrCat("--rank=", rank),
          "--listen=127.0.0.1:0",
          absl::StrCat(
              "--compute_threads=",
              std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / workers))};
      args.insert(args.end(), worker_args[rank].begin(), worker_args[rank].end());
      threads.emplace_back([&results, &binary, rank, args = std::move(args), timeout] {
        results[rank] = RunProcess(binary, args, timeout);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  std::vector<ProcessResult> done;
  for (int rank = 0; rank < workers; ++rank) {
    if (!results[rank].ok()) return results[rank].status();
    if (results[rank]->exit_code != 0) {
      return absl::InternalError(absl::StrCat("worker ", rank, " exited with ",
                                              results[rank]->exit_code, ":\n",
                                              results[rank]->stderr_text));
    }
    done.push_back(*std::move(results[rank]));
  }
  return done;
}

absl::Status LocalCluster::Terminate(absl::Duration timeout) {
  absl::Status first;
  for (auto& server : servers_) first.Update(server->Terminate(timeout));
  for (auto& coordinator : coordinators_) {
    if (coordinator != nullptr) first.Update(coordinator->Terminate(timeout));
  }
  return first;
}

std::string ResultJson(absl::string_view stdout_text) {
  std::string json;
  for (absl::string_view line : absl::StrSplit(stdout_text, '\n')) {
    if (absl::StartsWith(line, "RESULT ")) json = std::string(line.substr(7));
  }
  return json;
}

absl::Status CheckStepBreakdown(absl::string_view result_json, double tolerance) {
  const size_t at = result_json.find("\"step_ms\":{");
  if (at == absl::string_view::npos) {
    return absl::FailedPreconditionError(absl::StrCat("no step_ms in ", result_json));
  }
  const size_t end = result_json.find('}', at);
  const absl::string_view step_ms = result_json.substr(at, end - at + 1);
  double parts = 0;
  for (const char* part : {"read", "pull", "compute", "push", "allreduce", "wait", "other"}) {
    const double ms = JsonField(step_ms, part);
    if (!(ms >= 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("step_ms.", part, " is ", ms, ": ", step_ms));
    }
    parts += ms;
  }
  const double copy = JsonField(step_ms, "copy");
  if (!std::isnan(copy) && !(copy >= 0)) {
    return absl::FailedPreconditionError(absl::StrCat("step_ms.copy is ", copy));
  }
  if (!std::isnan(copy)) parts += copy;
  const double total = JsonField(step_ms, "total");
  if (!(std::abs(parts - total) <= tolerance * total)) {
    return absl::FailedPreconditionError(absl::StrCat("step_ms's parts add up to ", parts,
                                                      " ms, its total is ", total, ": ", step_ms));
  }
  const double steps = JsonField(result_json, "steps");
  const double run_ms = 1e3 * JsonField(result_json, "seconds") / steps;
  if (!(std::abs(total - run_ms) <= tolerance * run_ms)) {
    return absl::FailedPreconditionError(absl::StrCat("step_ms.total is ", total,
                                                      " ms, the run's seconds / steps ", run_ms,
                                                      " ms: ", result_json));
  }
  return absl::OkStatus();
}

absl::Status WriteJobFile(const config::Job& job, const std::string& path) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(job, &text)) {
    return absl::InternalError("cannot print the job");
  }
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<config::Job> LoadJobOnData(const std::string& path, const std::string& train,
                                          const std::string& heldout, int servers, int workers) {
  PS_ASSIGN_OR_RETURN(config::Job job, LoadJobFile(path));
  job.mutable_data()->clear_train_paths();
  job.mutable_data()->add_train_paths(train);
  job.mutable_data()->clear_eval_paths();
  job.mutable_data()->add_eval_paths(heldout);
  job.mutable_cluster()->set_num_servers(servers);
  job.mutable_cluster()->set_num_workers(workers);
  return job;
}

absl::StatusOr<std::string> RunDatagen(const DatagenOptions& options, absl::Duration timeout) {
  const int64_t heldout_rows = options.heldout_rows >= 0 ? options.heldout_rows : options.rows / 10;
  std::vector<std::string> args = {absl::StrCat("--rows=", options.rows),
                                   absl::StrCat("--heldout_rows=", heldout_rows),
                                   absl::StrCat("--out=", options.train_path),
                                   absl::StrCat("--heldout_out=", options.heldout_path),
                                   absl::StrCat("--cardinalities=", options.cardinalities)};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  PS_ASSIGN_OR_RETURN(ProcessResult result,
                      RunProcess(BinaryPath(options.bin_dir, "worker/tools/ps_datagen"), args,
                                 timeout));
  if (result.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("ps_datagen exited with ", result.exit_code, ": ", result.stderr_text));
  }
  return std::string(absl::StripAsciiWhitespace(result.stdout_text));
}

}  // namespace testing
}  // namespace ps
