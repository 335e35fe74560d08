// ps_coordinator: the coordinator daemon of one job.
//
//   ps_coordinator --job=JOB_FILE [--listen=0.0.0.0:0] [--advertise=HOST] [--port_file=PATH]
//                  [--heartbeat_ms=500] [--dead_after_ms=3000] [--restore=CHECKPOINT]
//                  [--data_dir=DIR] [--check_data=true] [--metrics_listen=HOST:PORT]
//                  [--metrics_port_file=PATH] [--tls_cert=PEM --tls_key=PEM] [--tls_ca=PEM]
//                  [--token_file=PATH] [--dry_run]
//
// With --tls_cert and --tls_key it serves TLS, with --tls_ca mutual TLS, and with --token_file
// it checks every call's bearer token (common/grpc/security.h); its calls to the servers use the
// same certificate and present the file's admin token.
//
// Before it serves it checks that the job's data files can be read from its current directory
// (common/data_check.h; --check_data=false where its host does not hold the data) and warns of a
// job too short to train well. Prints `ps_coordinator listening on ADVERTISED_HOST:PORT` once it
// serves. With --dry_run it checks its flags and the job (not the data), binds --listen and
// releases it, prints `ok` and exits. SIGTERM or SIGINT shut it down cleanly (exit 0). When a
// worker fails (it reports an error, or its heartbeats stop without its having left), the job
// fails: the coordinator tells the servers and the other workers through their heartbeats, which
// makes them exit, and then exits with status 3, saying which worker failed and why. Exit status
// 1: the job or its data is bad (`file:line:col: message` on stderr), the checkpoint to restore
// is damaged or does not fit the job (a missing or resized file, or tables that do not fit: nothing
// is started; a file whose checksum is wrong, found while the servers load: the members are told,
// as for a failed job, and no shard was served), or the port cannot be bound; 2: a usage error;
// 3: the job failed.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "common/daemon_flags.h"
#include "common/data_check.h"
#include "common/grpc/security_flags.h"
#include "common/grpc/server_builder.h"
#include "common/job_config.h"
#include "common/metrics/grpc_server_metrics.h"
#include "common/metrics/http_endpoint.h"
#include "common/metrics/registry.h"
#include "common/net_address.h"
#include "common/port_file.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/coordinator_store.h"
#include "server/coordinator/restore_check.h"

ABSL_FLAG(std::string, job, "", "Path of the job file (protobuf text, proto/job.proto). Required.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written to this file (atomically) once the server listens.");
ABSL_FLAG(std::string, restore, "",
          "Start the job from a checkpoint: a checkpoint's folder, or a checkpoint_dir (its newest "
          "complete one). Overrides the job's cluster.restore_from and cluster.resume.");
ABSL_FLAG(std::string, data_dir, "",
          "Keep the coordinator's state (members, shard map, clocks, rendezvous store) in a "
          "RocksDB database in this folder: a coordinator restarted with the same data_dir (and "
          "--listen port) carries on the running job. Empty: in memory only.");
ABSL_FLAG(bool, check_data, true,
          "Check at start that the job's data files (train_paths, eval_paths) can be read from "
          "this process's current directory, and refuse the job when they cannot. false: where "
          "this host does not hold the workers' data.");
ABSL_FLAG(int, heartbeat_ms, 500, "Heartbeat interval members are told to use, in ms (> 0).");
ABSL_FLAG(int, dead_after_ms, 3000,
          "A member silent for this long is marked dead, in ms (> heartbeat_ms).");

namespace {

// Large enough for the largest rendezvous value (16 MiB) several times over.
constexpr int kMaxMessageBytes = 256 << 20;
// How long in-flight calls get to finish at shutdown before they are cancelled.
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);
// The exit status of a coordinator whose job failed.
constexpr int kJobFailedExit = 3;
// After a job failed, the calls in flight are those of members that are exiting: they get less.
constexpr absl::Duration kFailedShutdownGrace = absl::Seconds(1);

// The self-pipe: the signal handler writes a byte, main reads it.
int g_signal_pipe[2] = {-1, -1};

extern "C" void OnTerminationSignal(int) {
  const int saved_errno = errno;
  const char byte = 1;
  // Nothing to do on failure: the pipe is full, so main is being woken already.
  if (write(g_signal_pipe[1], &byte, 1) < 0) {
  }
  errno = saved_errno;
}

absl::Status InstallSignalHandlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnTerminationSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int signal : {SIGTERM, SIGINT}) {
    if (sigaction(signal, &action, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("sigaction: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// Wakes WaitForSignal() as a signal would (the job failed).
void WakeMain() {
  const char byte = 2;
  if (write(g_signal_pipe[1], &byte, 1) < 0) {
  }
}

// Blocks until a termination signal arrives, or WakeMain().
void WaitForSignal() {
  char byte;
  while (read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ps_coordinator --job=JOB_FILE [--listen=HOST:PORT] [--advertise=HOST] [--port_file=F] "
      "[--heartbeat_ms=N] [--dead_after_ms=N] [--restore=CHECKPOINT] [--data_dir=DIR] "
      "[--metrics_listen=HOST:PORT] [--metrics_port_file=F] [--tls_cert=PEM --tls_key=PEM] "
      "[--tls_ca=PEM] [--token_file=F] [--dry_run]");
  absl::ParseCommandLine(argc, argv);

  const std::string job_path = absl::GetFlag(FLAGS_job);
  if (job_path.empty()) {
    std::fprintf(stderr, "ps_coordinator: --job is required\n");
    return 2;
  }
  const absl::StatusOr<ps::DaemonAddress> address = ps::DaemonAddressFromFlags();
  if (!address.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", std::string(address.status().message()).c_str());
    return 2;
  }
  const ps::HostPort& listen = address->listen;
  const absl::Duration heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
  const absl::Duration dead_after = absl::Milliseconds(absl::GetFlag(FLAGS_dead_after_ms));
  if (const absl::Status timing =
          ps::coordinator::Coordinator::CheckHeartbeatTiming(heartbeat_interval, dead_after);
      !timing.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s (--heartbeat_ms, --dead_after_ms)\n",
                 std::string(timing.message()).c_str());
    return 2;
  }

  const absl::StatusOr<ps::grpc_util::DaemonSecurity> security =
      ps::grpc_util::DaemonSecurityFromFlags("ps_coordinator");
  if (!security.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", std::string(security.status().message()).c_str());
    return 2;
  }

  absl::StatusOr<ps::config::Job> job = ps::LoadJobFile(job_path);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_check_data) && !absl::GetFlag(FLAGS_dry_run)) {
    ps::DataCheckOptions data_options;
    data_options.job_path = job_path;
    data_options.checker = "ps_coordinator";
    const ps::DataCheckResult data = ps::CheckJobData(*job, data_options);
    for (const std::string& error : data.errors) std::fprintf(stderr, "%s\n", error.c_str());
    if (!data.ok()) {
      std::fprintf(stderr,
                   "ps_coordinator: the job's workers could not read their data; nothing is "
                   "started (--check_data=false skips this check where this host does not hold "
                   "the data)\n");
      return 1;
    }
    if (data.estimate.has_value()) {
      std::fprintf(stderr, "ps_coordinator: data: %s\n", data.estimate->Describe().c_str());
    }
    for (const std::string& warning : data.warnings) {
      std::fprintf(stderr, "ps_coordinator: warning: %s\n", warning.c_str());
    }
  }
  if (absl::GetFlag(FLAGS_dry_run)) {
    if (const absl::Status can_listen = ps::CheckCanListenFromFlags(listen); !can_listen.ok()) {
      std::fprintf(stderr, "ps_coordinator: %s\n", std::string(can_listen.message()).c_str());
      return 1;
    }
    std::printf("ok: ps_coordinator would listen on %s and advertise %s\n",
                ps::JoinHostPort(listen.host, listen.port).c_str(), address->advertise.c_str());
    return 0;
  }

  ps::coordinator::CoordinatorOptions options;
  std::unique_ptr<ps::coordinator::CoordinatorStore> store;
  bool carrying_on = false;
  if (const std::string data_dir = absl::GetFlag(FLAGS_data_dir); !data_dir.empty()) {
    absl::StatusOr<std::unique_ptr<ps::coordinator::CoordinatorStore>> opened =
        ps::coordinator::CoordinatorStore::Open(data_dir);
    if (!opened.ok()) {
      std::fprintf(stderr, "ps_coordinator: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    store = *std::move(opened);
    absl::StatusOr<std::optional<ps::coordinator::SavedCoordinator>> saved = store->Load();
    carrying_on = saved.ok() && saved->has_value();
    options.store = store.get();
  }
  // A job restored from a checkpoint starts only from one that is intact and fits it: the quick
  // checks here, the files' checksums (a read of every file) below, while the servers load.
  std::optional<ps::coordinator::RestorePoint> to_verify;
  const std::string restore = ps::coordinator::RestorePathOf(absl::GetFlag(FLAGS_restore), *job);
  if (!restore.empty() && carrying_on) {
    std::fprintf(stderr,
                 "ps_coordinator: the data_dir holds the running job, which carries on: the "
                 "checkpoint %s is not restored\n",
                 restore.c_str());
  } else if (!restore.empty()) {
    const absl::Time start = absl::Now();
    absl::StatusOr<ps::coordinator::RestorePoint> point =
        ps::coordinator::CheckRestorable(restore, *job);
    if (!point.ok()) {
      std::fprintf(stderr, "ps_coordinator: cannot restore from %s: %s\n", restore.c_str(),
                   point.status().ToString().c_str());
      return 1;
    }
    std::fprintf(stderr,
                 "ps_coordinator: restoring checkpoint %llu from %s (step %lld, %d shards; "
                 "manifests, tables and sizes checked in %.2f s)\n",
                 static_cast<unsigned long long>(point->manifest.id()), point->folder.c_str(),
                 static_cast<long long>(point->manifest.step()), point->manifest.shards_size(),
                 absl::ToDoubleSeconds(absl::Now() - start));
    options.restore_from = point->folder;
    options.restore_manifest = point->manifest;
    options.restore_files_checked = false;
    to_verify = *std::move(point);
  }
  options.job = *std::move(job);
  options.heartbeat_interval = heartbeat_interval;
  options.dead_after = dead_after;
  // A failed job wakes main, which tells the members and exits.
  options.on_job_failed = [](const ps::rpc::JobFailure&) { WakeMain(); };
  // Before the coordinator exists: a restored state may fail the job early.
  const absl::Status signals = InstallSignalHandlers();
  if (!signals.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", signals.ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ps::coordinator::Coordinator>> coordinator =
      ps::coordinator::Coordinator::Create(std::move(options));
  if (!coordinator.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", coordinator.status().ToString().c_str());
    return 2;
  }
  // A checkpoint that cannot be restored fails the job; the exit status is then 1.
  std::atomic<bool> restore_refused{false};
  auto refuse_restore = [&restore_refused, c = coordinator->get()](const std::string& folder,
                                                                   const absl::Status& why) {
    std::fprintf(stderr, "ps_coordinator: cannot restore from %s: %s\n", folder.c_str(),
                 why.ToString().c_str());
    restore_refused = true;
    c->RefuseRestore(why);
  };
  // A coordinator restarted before its restore's files were checked checks them again.
  if (const std::string unchecked = (*coordinator)->UncheckedRestore();
      !to_verify.has_value() && !unchecked.empty()) {
    absl::StatusOr<ps::coordinator::RestorePoint> point =
        ps::coordinator::CheckRestorable(unchecked, (*coordinator)->job());
    if (point.ok()) {
      to_verify = *std::move(point);
    } else {
      refuse_restore(unchecked, point.status());
    }
  }
  ps::coordinator::CoordinatorService service(coordinator->get(), nullptr,
                                              security->channel_credentials);
  ps::metrics::Registry registry;
  ps::coordinator::Coordinator* const coordinator_ptr = coordinator->get();
  ps::coordinator::AddCoordinatorCollector(&registry,
                                           [coordinator_ptr] { return coordinator_ptr->Status(); });
  service.SetMetrics(&registry);
  ps::grpc_util::ServerOptions server_options;
  server_options.listen_address = ps::JoinHostPort(listen.host, listen.port);
  server_options.max_receive_message_bytes = kMaxMessageBytes;
  server_options.max_send_message_bytes = kMaxMessageBytes;
  server_options.credentials = security->server_credentials;
  // A dead client's connection is dropped (keepalive), an idle one closed; long polls (WaitClock,
  // KvWait) are calls, so their connections are neither.
  server_options.max_concurrent_streams = 1024;
  server_options.keepalive_time_ms = 60 * 1000;
  server_options.keepalive_timeout_ms = 20 * 1000;
  server_options.max_connection_idle_ms = 30 * 60 * 1000;
  if (ps::MetricsEndpointWanted()) {
    server_options.interceptors.push_back(
        ps::metrics::MakeServerMetricsInterceptorFactory(&registry, "ps_coordinator"));
  }
  absl::StatusOr<ps::grpc_util::StartedServer> started =
      ps::grpc_util::StartServer(std::move(server_options), {&service});
  if (!started.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", std::string(started.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<grpc::Server> server = std::move(started->server);
  const int bound_port = started->port;
  // Members taken up from --data_dir are judged by their heartbeats from now on, not from when
  // the state was read.
  (*coordinator)->StartServing();
  // Members taken up from --data_dir are judged by their heartbeats from now on, not from when
  // the state was read.
  (*coordinator)->StartServing();

  absl::StatusOr<std::unique_ptr<ps::metrics::MetricsEndpoint>> metrics_endpoint =
      ps::StartMetricsEndpointFromFlags("ps_coordinator", &registry);
  if (!metrics_endpoint.ok()) {
    std::fprintf(stderr, "%s\n", std::string(metrics_endpoint.status().message()).c_str());
    (*coordinator)->Shutdown();
    server->Shutdown();
    return 1;
  }
  std::fprintf(stderr, "ps_coordinator: gRPC security: %s\n",
               security->security.Describe().c_str());
  // Printed before the port file is written, so that whoever waits for the file finds the line.
  std::printf("ps_coordinator listening on %s\n",
              ps::JoinHostPort(address->advertise, bound_port).c_str());
  std::fflush(stdout);
  // Every file read once for its checksum, while the servers already load their shards: they
  // serve them once this has passed. A damaged file fails the job (exit status 1).
  std::thread verifier;
  std::atomic<bool> stop_verifying{false};  // a shutdown does not wait for every file
  if (to_verify.has_value()) {
    verifier = std::thread([&to_verify, &refuse_restore, &stop_verifying, c = coordinator->get()] {
      const absl::Time start = absl::Now();
      const absl::Status verified =
          ps::coordinator::VerifyRestoreFiles(*to_verify, &stop_verifying);
      if (absl::IsCancelled(verified)) return;  // shutting down
      if (verified.ok()) {
        std::fprintf(stderr,
                     "ps_coordinator: the %zu files of checkpoint %s are intact (read in %.2f s)\n",
                     to_verify->files.size(), to_verify->folder.c_str(),
                     absl::ToDoubleSeconds(absl::Now() - start));
        c->RestoreFilesChecked();
        return;
      }
      refuse_restore(to_verify->folder, verified);
    });
  }

  int exit_code = 0;
  absl::Duration shutdown_grace = kShutdownGrace;
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  const absl::Status written =
      port_file.empty() ? absl::OkStatus() : ps::WritePortFile(port_file, bound_port);
  if (written.ok()) {
    WaitForSignal();
    if (const std::optional<ps::rpc::JobFailure> failure = (*coordinator)->failure()) {
      // Every live member hears of it with its next heartbeat's answer; a member that never
      // heartbeats again is found dead within dead_after.
      const absl::Time start = absl::Now();
      const bool told = (*coordinator)->AwaitFailureTold(dead_after + 2 * heartbeat_interval);
      std::fprintf(stderr, "ps_coordinator: the job failed: %s; %s in %.1f s; exiting\n",
                   ps::DescribeJobFailure(*failure).c_str(),
                   told ? "every live member was told" : "not every live member could be told",
                   absl::ToDoubleSeconds(absl::Now() - start));
      exit_code = restore_refused ? 1 : kJobFailedExit;
      shutdown_grace = kFailedShutdownGrace;
    } else {
      std::fprintf(stderr, "ps_coordinator: shutting down\n");
    }
  } else {
    std::fprintf(stderr, "ps_coordinator: %s\n", written.ToString().c_str());
    exit_code = 1;
  }

  stop_verifying = true;
  if (verifier.joinable()) verifier.join();
  metrics_endpoint->reset();  // scrapes read the coordinator
  // End pending waits first so that the server's shutdown does not wait for their deadlines.
  (*coordinator)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(shutdown_grace));
  server.reset();
  // The coordinator goes last, at return, after the service declared after it: the service's
  // checkpoint scheduler cancels its wait on the coordinator as it stops (freeing the coordinator
  // here first was a use after free ASan found).
  return exit_code;
}
