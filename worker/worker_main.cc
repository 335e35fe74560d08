// ps_worker: trains the job's model as one worker of a cluster.
//
//   ps_worker --coordinator=HOST:PORT[,HOST:PORT...] [--rank=-1] [--listen=0.0.0.0:0]
//             [--advertise=HOST] [--metrics_file=PATH] [--progress_s=5]
//             [--metrics_listen=HOST:PORT]
//             [--metrics_port_file=PATH] [--metrics_final_scrape_s=0] [--connect_timeout_s=45]
//             [--tls_ca=PEM] [--tls_cert=PEM --tls_key=PEM] [--token_file=PATH] [--dry_run]
//
// With --tls_ca its calls to the coordinator and the servers use TLS (presenting --tls_cert as
// its client certificate when given), and with --token_file they carry the file's worker token
// (its admin token when it has none). Gloo's traffic between workers is not encrypted:
// deploy/README.md's Security section says how to keep it on a private network.
//
// The other workers reach this one (Gloo's TCP connections, NCCL's bootstrap) at its advertised
// host: the --listen host when it is a specific address, else --advertise or this host's default
// (common/net_address.h). Gloo binds that address and picks its own ports, so --listen takes port
// 0 only.
//
// Registers with the coordinator (which hands it the job and its rank), joins the workers'
// AllReduce group, trains, and rank 0 evaluates on the held-out data (worker/trainer.h). Its last
// line on stdout is `RESULT {json}` with the run's figures, the held-out ones (worker 0's) on every
// rank, and it leaves the job. Exit status 0 on success, 1 on failure: once registered, a worker
// that fails reports its error to the coordinator, which fails the job, and a worker told by the
// coordinator that the job failed (another worker failed) says so and exits with status 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "common/daemon_flags.h"
#include "common/grpc/security_flags.h"
#include "common/metrics/http_endpoint.h"
#include "common/metrics/registry.h"
#include "common/net_address.h"
#include "common/process_tuning.h"
#include "cuda_kernels/device.h"
#include "worker/collective/allreduce.h"
#include "worker/model/cpu_model.h"
#include "worker/progress_report.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, coordinator, "",
          "host:port, or several comma-separated: the job's coordinators (required)");
ABSL_FLAG(int, rank, -1, "this worker's rank, or -1 for the next free one");
ABSL_FLAG(std::string, metrics_file, "", "append JSON-lines progress metrics to this file");
ABSL_FLAG(double, progress_s, 5, "seconds between progress lines");
ABSL_FLAG(double, metrics_final_scrape_s, 0,
          "with --metrics_listen: after training, wait up to this many seconds for one more "
          "scrape of /metrics, so that the scraper sees the final step (0: exit at once)");
ABSL_FLAG(int64_t, max_steps, 0, "stop after this many steps (0: as the job says)");
ABSL_FLAG(int, connect_timeout_s, 45,
          "how long to wait for the coordinator, the cluster and the other workers at start, and "
          "for a coordinator that stops answering later (one restarting from its data_dir); then "
          "the worker exits with status 1");
ABSL_FLAG(std::string, backend, "auto",
          "where the model runs: auto (CUDA when a device is present), cpu or gpu");
ABSL_FLAG(std::string, collective, "auto",
          "the dense AllReduce among workers: auto (NCCL on CUDA device 0 when the model runs on "
          "a GPU, else Gloo over TCP), gloo or nccl; every worker of a job must end up with the "
          "same one");
ABSL_FLAG(int, compute_threads, 0,
          "threads of the CPU model's matrix products (0: one per core); workers sharing a "
          "machine should split its cores");
ABSL_FLAG(bool, pipeline, true,
          "overlap each step's read and pull with the step before as far as the mode allows "
          "(false: one after the other; a SYNC run trains the same model either way)");
ABSL_FLAG(double, slowdown, 1.0,
          "experiments: run at 1/slowdown of full speed (an induced straggler)");

namespace ps {
namespace {

std::string JsonNumber(double x) {
  return std::isfinite(x) ? absl::StrCat(x) : std::string("null");
}

// `s` as the inside of a JSON string (the paths of checkpoints).
std::string JsonEscaped(const std::string& s) {
  return absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}});
}

// The row cache's figures over the run as a JSON object, or null without a cache.
std::string RowCacheJson(const worker::TrainResult& result) {
  if (!result.row_cache.has_value()) return "null";
  return worker::RowCacheStatsJson(*result.row_cache);
}

// The last line on stdout: `RESULT {json}` with the run's figures.
void PrintResult(const worker::TrainResult& result, int rank, const config::Job& job) {
  // The best held-out AUC of the evaluations during training (NaN without any).
  double best_auc = std::nan("");
  for (const worker::Evaluation& e : result.evaluations) {
    if (std::isnan(best_auc) || e.metrics.auc > best_auc) best_auc = e.metrics.auc;
  }
  std::printf(
      "RESULT "
      "{\"backend\":\"%s\",\"rank\":%d,\"workers\":%d,\"servers\":%d,\"steps\":%lld,\"samples\":%"
      "lld,"
      "\"samples_per_s\":%.1f,\"seconds\":%.2f,\"final_loss\":%s,\"heldout_auc\":%s,"
      "\"heldout_logloss\":%s,\"heldout_samples\":%lld,\"skipped_lines\":%lld,"
      "\"read_bytes\":%lld,\"heldout_by_rank\":0,\"evaluations\":%d,\"best_heldout_auc\":%s,"
      "\"stopped_early_at\":%s,"
      "\"mean_pull_ms\":%.3f,\"mean_push_ms\":%.3f,\"mean_batch\":%.1f,\"checkpoint\":\"%s\","
      "\"kept_step\":%s,\"kept_checkpoint\":\"%s\",\"row_cache\":%s,\"step_ms\":%s}\n",
      result.backend.c_str(), rank, job.cluster().num_workers(), job.cluster().num_servers(),
      static_cast<long long>(result.steps), static_cast<long long>(result.samples),
      result.samples_per_s, result.seconds, JsonNumber(result.final_loss).c_str(),
      JsonNumber(result.heldout_auc).c_str(), JsonNumber(result.heldout_logloss).c_str(),
      static_cast<long long>(result.heldout_samples), static_cast<long long>(result.skipped_lines),
      static_cast<long long>(result.read_bytes), static_cast<int>(result.evaluations.size()),
      JsonNumber(best_auc).c_str(),
      result.stopped_early_at >= 0 ? absl::StrCat(result.stopped_early_at).c_str() : "null",
      result.mean_pull_ms, result.mean_push_ms, result.mean_batch,
      JsonEscaped(result.checkpoint).c_str(),
      result.kept_step >= 0 ? absl::StrCat(result.kept_step).c_str() : "null",
      JsonEscaped(result.kept_checkpoint).c_str(), RowCacheJson(result).c_str(),
      worker::StepBreakdownJson(result.step_times, result.steps, result.copy_measured).c_str());
}

// Joins the workers' dense AllReduce group. GPU workers reduce over NCCL (the model's host
// buffers staged through device memory), the rest over Gloo. The model runs on device 0 of those
// this process sees: workers sharing a machine each get theirs through CUDA_VISIBLE_DEVICES, as
// NCCL needs one device per rank. Errors of the collective, with their code, as the message the
// worker fails with.
absl::StatusOr<std::unique_ptr<worker::AllReduce>> JoinDenseGroup(
    const config::Job& job, int rank, int devices, worker::Backend backend,
    const std::string& collective, const std::string& collective_host,
    CoordinatorClient* coordinator, absl::Duration timeout) {
  const bool gpu_model =
      backend == worker::Backend::kGpu || (backend == worker::Backend::kAuto && devices > 0);
  const bool nccl = collective == "nccl" || (collective == "auto" && gpu_model);
  const std::string group = absl::StrCat(job.name(), "/dense");
  const int workers = static_cast<int>(job.cluster().num_workers());
  std::fprintf(stderr, "worker %d: dense AllReduce over %s\n", rank, nccl ? "NCCL" : "Gloo");
  if (nccl && std::getenv("NCCL_SOCKET_IFNAME") == nullptr) {
    // NCCL's bootstrap picks an interface of its own; the advertised address's is the one the
    // other workers reach.
    if (absl::StatusOr<std::string> iface = InterfaceWithAddress(collective_host); iface.ok()) {
      setenv("NCCL_SOCKET_IFNAME", iface->c_str(), 1);
      std::fprintf(stderr, "worker %d: NCCL_SOCKET_IFNAME=%s (the interface of %s)\n", rank,
                   iface->c_str(), collective_host.c_str());
    }
  }
  worker::AllReduce::GlooOptions gloo;
  gloo.hostname = collective_host;
  absl::StatusOr<std::unique_ptr<worker::AllReduce>> allreduce =
      nccl ? worker::AllReduce::CreateNccl(coordinator, group, rank, workers, 0, timeout)
           : worker::AllReduce::CreateGloo(coordinator, group, rank, workers, timeout, gloo);
  if (!allreduce.ok()) {
    return absl::Status(
        allreduce.status().code(),
        absl::StrCat("ps_worker: ", nccl ? "NCCL" : "Gloo",
                     " AllReduce: ", allreduce.status().ToString(),
                     absl::IsDeadlineExceeded(allreduce.status())
                         ? " (do all workers use the same --collective?)"
                         : ""));
  }
  if ((*allreduce)->shared_memory()) {
    std::fprintf(stderr,
                 "worker %d: dense AllReduce through shared memory (every worker on this host)\n",
                 rank);
  }
  return allreduce;
}

// Registers with the coordinator, joins the workers' dense group, trains and prints the result
// (the flags checked by Main). Exit status 0, or 1 on failure (reported to the coordinator once
// registered).
int Run(const std::string& address, const std::string& collective_host,
        const std::string& collective, int connect_timeout_s, worker::Backend backend,
        const grpc_util::Security& security, metrics::Registry* registry,
        metrics::MetricsEndpoint* metrics_endpoint) {
  const absl::Duration timeout = absl::Seconds(connect_timeout_s);
  const std::shared_ptr<grpc::ChannelCredentials> credentials = security.ChannelCredentials();
  // Before registering, so that every failure after it can be reported.
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> coordinator =
      CoordinatorClient::Connect(address, timeout, credentials);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  // A coordinator restarting from its data_dir is waited for, not a reason to stop training.
  (*coordinator)->SetRetryWindow(timeout);
  ClientOptions options;
  options.coordinator = address;
  // One connection: the clocks this worker reports through it go with its heartbeats, so that a
  // coordinator that takes over rebuilds them.
  options.coordinator_client = coordinator->get();
  options.credentials = credentials;
  options.connect_timeout = timeout;
  options.role = rpc::WORKER;
  options.rank = absl::GetFlag(FLAGS_rank);
  // A worker whose coordinator is gone for good stops with a clear message rather than wait.
  options.coordinator_lost_after = timeout;
  options.on_coordinator_lost = [address, connect_timeout_s](const absl::Status& error) {
    std::fprintf(stderr,
                 "ps_worker: the coordinator at %s has not answered for %d s (%s); exiting\n",
                 address.c_str(), connect_timeout_s, error.ToString().c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
  // Another worker failed: the job cannot go on.
  options.on_job_failed = [](const rpc::JobFailure& failure) {
    std::fprintf(stderr, "ps_worker: the job failed: %s; exiting\n",
                 DescribeJobFailure(failure).c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const config::Job& job = (*client)->job();
  const int rank = (*client)->rank();
  // From here on a failure is reported, so that the coordinator fails the job at once (and the
  // servers and other workers stop) rather than find this worker silent.
  const uint32_t member_id = (*client)->worker_id();
  // The worker then exits at once: calls in flight may wait on steps that will never be applied,
  // and its heartbeats must stop.
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "%s\n", message.c_str());
    const absl::Status reported = (*coordinator)->ReportWorkerFailure(member_id, message);
    if (!reported.ok()) {
      std::fprintf(stderr, "worker %d: could not report the failure to the coordinator: %s\n", rank,
                   reported.ToString().c_str());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
    return 1;
  };
  // A restored job resumes: sync jobs at the checkpoint's step, with the workers' state in it.
  const std::string restored = (*client)->shard_map().restore_from();
  if (!restored.empty() && job.training().mode() != config::Training::SYNC) {
    return fail(absl::StrCat(
        "ps_worker: the job was restored from checkpoint ", restored,
        ", and workers resume only sync jobs (in the other modes no step boundary holds the "
        "workers' state). The restored tables are served to clients (ps_client)."));
  }
  worker::SetCpuThreads(absl::GetFlag(FLAGS_compute_threads));
  const int devices = cuda::DeviceCount();
  std::fprintf(stderr, "worker %d: %d CUDA devices, backend %s\n", rank, devices,
               absl::GetFlag(FLAGS_backend).c_str());
  absl::StatusOr<std::unique_ptr<worker::AllReduce>> allreduce =
      JoinDenseGroup(job, rank, devices, backend, collective, collective_host, coordinator->get(),
                     timeout);
  if (!allreduce.ok()) return fail(std::string(allreduce.status().message()));
  worker::TrainerOptions trainer;
  trainer.metrics_path = absl::GetFlag(FLAGS_metrics_file);
  if (metrics_endpoint != nullptr) trainer.metrics = registry;
  trainer.progress_interval = absl::Seconds(absl::GetFlag(FLAGS_progress_s));
  trainer.max_steps = absl::GetFlag(FLAGS_max_steps);
  trainer.slowdown = std::max(1.0, absl::GetFlag(FLAGS_slowdown));
  trainer.pipeline = absl::GetFlag(FLAGS_pipeline);
  trainer.backend = backend;
  trainer.resume_from = restored;
  trainer.start_step = (*client)->start_step();
  absl::StatusOr<worker::TrainResult> result = worker::Train(
      job, client->get(), coordinator->get(), (*client)->worker_id(), allreduce->get(), trainer);
  if (!result.ok()) return fail(absl::StrCat("worker ", rank, ": ", result.status().ToString()));
  PrintResult(*result, rank, job);
  std::fflush(stdout);
  if (metrics_endpoint != nullptr && absl::GetFlag(FLAGS_metrics_final_scrape_s) > 0) {
    metrics_endpoint->AwaitScrapeAfter(metrics_endpoint->scrapes(),
                                       absl::Seconds(absl::GetFlag(FLAGS_metrics_final_scrape_s)));
  }
  return 0;
}

int Main() {
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  if (address.empty()) {
    std::fprintf(stderr, "ps_worker: --coordinator is required\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_compute_threads) < 0) {
    std::fprintf(stderr, "ps_worker: --compute_threads must be >= 0 (0: one per core), got %d\n",
                 absl::GetFlag(FLAGS_compute_threads));
    return 2;
  }
  const std::string collective = absl::GetFlag(FLAGS_collective);
  if (collective != "auto" && collective != "gloo" && collective != "nccl") {
    std::fprintf(stderr, "ps_worker: --collective must be auto, gloo or nccl, got \"%s\"\n",
                 collective.c_str());
    return 2;
  }
  if (const absl::StatusOr<std::vector<std::string>> parsed = ParseCoordinatorAddresses(address);
      !parsed.ok()) {
    std::fprintf(stderr, "ps_worker: --coordinator: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  const absl::StatusOr<DaemonAddress> own = DaemonAddressFromFlags();
  if (!own.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", std::string(own.status().message()).c_str());
    return 2;
  }
  if (own->listen.port != 0) {
    std::fprintf(stderr,
                 "ps_worker: --listen=%s: a worker takes port 0 only (the AllReduce picks its own "
                 "ports)\n",
                 absl::GetFlag(FLAGS_listen).c_str());
    return 2;
  }
  // Gloo listens on the address it gives its peers: a specific --listen host, else the advertised.
  const std::string collective_host =
      IsWildcardHost(own->listen.host) ? own->advertise : own->listen.host;
  const int connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout_s);
  if (connect_timeout_s <= 0) {
    std::fprintf(stderr, "ps_worker: --connect_timeout_s must be > 0, got %d\n", connect_timeout_s);
    return 2;
  }
  absl::StatusOr<worker::Backend> backend = worker::ParseBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  const absl::StatusOr<grpc_util::Security> security =
      grpc_util::SecurityFromFlags(grpc_util::TokenRole::kWorker);
  if (!security.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_dry_run)) {
    if (const absl::Status can_listen = CheckCanListenFromFlags({collective_host, 0});
        !can_listen.ok()) {
      std::fprintf(stderr, "ps_worker: %s\n", std::string(can_listen.message()).c_str());
      return 1;
    }
    std::printf("ok: ps_worker would reach the coordinator at %s and advertise %s\n",
                address.c_str(), collective_host.c_str());
    return 0;
  }
  metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<metrics::MetricsEndpoint>> metrics_endpoint =
      StartMetricsEndpointFromFlags("ps_worker", &registry);
  if (!metrics_endpoint.ok()) {
    std::fprintf(stderr, "%s\n", std::string(metrics_endpoint.status().message()).c_str());
    return 1;
  }
  return Run(address, collective_host, collective, connect_timeout_s, *backend, *security,
             &registry, metrics_endpoint->get());
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::SetProgramUsageMessage(
      "ps_worker --coordinator=HOST:PORT[,HOST:PORT...] [--rank=N] [--listen=HOST:0] "
      "[--advertise=HOST] "
      "[--dry_run]");
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}
