// ps_coordinator: the coordinator daemon of one job.
//
//   ps_coordinator --job=JOB_FILE [--listen=0.0.0.0:0] [--advertise=HOST] [--port_file=PATH]
//                  [--heartbeat_ms=500] [--dead_after_ms=3000] [--restore=CHECKPOINT]
//                  [--data_dir=DIR] [--check_data=true] [--metrics_listen=HOST:PORT]
//                  [--metrics_port_file=PATH] [--tls_cert=PEM --tls_key=PEM] [--tls_ca=PEM]
//                  [--token_file=PATH] [--dry_run]
//                  [--etcd=HOST:PORT,... [--etcd_prefix=/ps/JOB/] [--lease_ttl_s=2]]
//
// With --etcd several coordinators of one job run at once (server/README.md, "Coordinators with
// etcd"): each stands by (answering every call UNAVAILABLE, naming the leader) until it wins the
// election, then loads the job's state from etcd and leads until it stops, or until it can no
// longer be sure of its lease (its process was paused, etcd lost its quorum, a write was
// refused): it then stands by again. On SIGTERM a leader resigns, so that a standby takes over
// at once.
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

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "common/daemon_flags.h"
#include "common/data_check.h"
#include "common/dense_moments.h"
#include "common/grpc/security_flags.h"
#include "common/grpc/server_builder.h"
#include "common/job_config.h"
#include "common/metrics/grpc_server_metrics.h"
#include "common/metrics/http_endpoint.h"
#include "common/metrics/registry.h"
#include "common/net_address.h"
#include "common/port_file.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/coordinator_store.h"
#include "server/coordinator/etcd_client.h"
#include "server/coordinator/etcd_state_store.h"
#include "server/coordinator/leader_election.h"
#include "server/coordinator/restore_check.h"
#include "server/coordinator/standby_service.h"

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
ABSL_FLAG(std::string, etcd, "",
          "Run as one of several coordinators of the job: its state in etcd at these endpoints "
          "(host:port or http://host:port, comma-separated), one coordinator leading under an "
          "etcd lease, the others standing by (server/README.md). Excludes --data_dir.");
ABSL_FLAG(std::string, etcd_prefix, "",
          "With --etcd: the key prefix of the job's state (default /ps/<job name>/). Coordinators "
          "of one job share it; jobs sharing an etcd cluster need different ones.");
ABSL_FLAG(int, lease_ttl_s, 2,
          "With --etcd: the leader's lease, in seconds (>= 1; etcd grants at least 1.5 election "
          "timeouts). How long a job may have no coordinator after its leader dies.");
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

// The self-pipe: the signal handler (and WakeMain) write a byte, the WatchSignals thread reads it.
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

// Tells main that the job failed, through the signal pipe (WatchSignals sets job_failed).
void WakeMain() {
  const char byte = 2;
  if (write(g_signal_pipe[1], &byte, 1) < 0) {
  }
}

// Ends WatchSignals.
void StopSignalWatcher() {
  const char byte = 0;
  if (write(g_signal_pipe[1], &byte, 1) < 0) {
  }
}

// What woke main: a termination signal, the job's failure (WakeMain), a shared store's refused
// write.
struct Wakeup {
  absl::Mutex mu;
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool job_failed ABSL_GUARDED_BY(mu) = false;
  bool store_failed ABSL_GUARDED_BY(mu) = false;
  absl::Status store_error ABSL_GUARDED_BY(mu);
};
Wakeup g_wakeup;

// Reads the signal pipe until StopSignalWatcher: a signal sets stop (and calls `on_stop`), a
// WakeMain sets job_failed.
void WatchSignals(const std::function<void()>& on_stop) {
  while (true) {
    char byte;
    const ssize_t n = read(g_signal_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) return;
    {
      absl::MutexLock lock(&g_wakeup.mu);
      (byte == 1 ? g_wakeup.stop : g_wakeup.job_failed) = true;
    }
    if (byte == 1 && on_stop) on_stop();
  }
}

// What every term of this process serves.
struct Setup {
  ps::config::Job job;
  ps::DaemonAddress address;
  absl::Duration heartbeat_interval;
  absl::Duration dead_after;
  ps::grpc_util::DaemonSecurity security;
  std::string restore;  // the checkpoint to start from (RestorePathOf), or empty
};

// The port this process serves on, the same for every server it starts (the first one's, when
// --listen asked for port 0), and whether the port file was written.
struct Listener {
  int port = 0;
  bool announced = false;
};

// The coordinator serving now (none while standing by), for the metrics.
struct CurrentCoordinator {
  absl::Mutex mu;
  ps::coordinator::Coordinator* coordinator ABSL_GUARDED_BY(mu) = nullptr;
};

ps::grpc_util::ServerOptions CoordinatorServerOptions(const Setup& setup, int port) {
  ps::grpc_util::ServerOptions options;
  options.listen_address = ps::JoinHostPort(setup.address.listen.host, port);
  options.max_receive_message_bytes = kMaxMessageBytes;
  options.max_send_message_bytes = kMaxMessageBytes;
  options.credentials = setup.security.server_credentials;
  // A dead client's connection is dropped (keepalive), an idle one closed; long polls (WaitClock,
  // KvWait) are calls, so their connections are neither.
  options.max_concurrent_streams = 1024;
  options.keepalive_time_ms = 60 * 1000;
  options.keepalive_timeout_ms = 20 * 1000;
  options.max_connection_idle_ms = 30 * 60 * 1000;
  return options;
}

// Once per process, when its first server listens: the line launchers wait for, then the port
// file. Its error (the port file could not be written).
absl::Status Announce(const Setup& setup, Listener* listener, int bound_port) {
  listener->port = bound_port;
  if (listener->announced) return absl::OkStatus();
  listener->announced = true;
  // Printed before the port file is written, so that whoever waits for the file finds the line.
  std::printf("ps_coordinator listening on %s\n",
              ps::JoinHostPort(setup.address.advertise, bound_port).c_str());
  std::fflush(stdout);
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  return port_file.empty() ? absl::OkStatus() : ps::WritePortFile(port_file, bound_port);
}

// Serves a new StandbyService answering `why()` on the listener's port (gRPC serves a generic
// service with one server only: `*standby` is replaced, after the server that served it).
absl::Status StartStandby(const Setup& setup, const std::function<absl::Status()>& why,
                          Listener* listener, std::unique_ptr<grpc::Server>* server,
                          std::unique_ptr<ps::coordinator::StandbyService>* standby) {
  server->reset();
  *standby = std::make_unique<ps::coordinator::StandbyService>(why);
  ps::grpc_util::ServerOptions options = CoordinatorServerOptions(setup, listener->port);
  options.generic_service = standby->get();
  PS_ASSIGN_OR_RETURN(ps::grpc_util::StartedServer started,
                      ps::grpc_util::StartServer(std::move(options), {}));
  *server = std::move(started.server);
  return Announce(setup, listener, started.port);
}

// What the leader tells of the election (ClusterStatus.leadership, ps_ctl status) and the
// metrics of it, refreshed every second on a thread of its own, so that a status call never
// waits on etcd. Thread-safe.
class LeadershipView {
 public:
  LeadershipView(ps::coordinator::EtcdClient* etcd, ps::coordinator::LeaderElection* election,
                 std::string prefix, ps::metrics::Registry* registry)
      : etcd_(etcd), election_(election), prefix_(std::move(prefix)) {
    is_leader_ = registry->GetGauge("ps_coordinator_is_leader",
                                    "1 while this coordinator leads the job, 0 while it stands by");
    terms_ = registry->GetCounter("ps_coordinator_terms_won_total",
                                  "Elections this coordinator won (it took over the job)");
    registry->AddCollector([this](ps::metrics::Sink& sink) { Collect(sink); });
    thread_ = std::thread([this] { Loop(); });
  }
  ~LeadershipView() { Stop(); }

  void TookOffice(const ps::coordinator::LeaderElection::Term& term) {
    absl::MutexLock lock(&mu_);
    term_ = term;
    is_leader_->Set(1);
    terms_->Increment();
  }
  void LeftOffice() {
    absl::MutexLock lock(&mu_);
    term_.reset();
    is_leader_->Set(0);
  }
  void Fill(ps::rpc::ClusterStatus* status) {
    absl::MutexLock lock(&mu_);
    *status->mutable_leadership() = view_;
    if (term_.has_value()) {
      status->mutable_leadership()->set_took_office_unix_ms(absl::ToUnixMillis(term_->took_office));
      status->mutable_leadership()->set_terms(term_->number);
    }
  }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stopped_) {
      mu_.Unlock();
      ps::rpc::Leadership view;
      view.set_leader(election_->leader());
      view.set_lease_ttl_s(election_->lease_ttl_s());
      view.set_prefix(prefix_);
      absl::StatusOr<std::vector<std::string>> candidates = election_->Candidates();
      if (candidates.ok()) {
        for (const std::string& c : *candidates) {
          if (c != view.leader()) view.add_standbys(c);
        }
      }
      for (const auto& health : etcd_->CheckEndpoints(absl::Milliseconds(500))) {
        ps::rpc::EtcdEndpoint* e = view.add_etcd();
        e->set_endpoint(health.endpoint);
        e->set_healthy(health.healthy);
        e->set_latency_ms(health.latency_ms);
        e->set_error(health.error);
        e->set_is_raft_leader(health.is_raft_leader);
      }
      mu_.Lock();
      view_ = std::move(view);
      mu_.AwaitWithTimeout(absl::Condition(&stopped_), absl::Seconds(1));
    }
  }

  void Collect(ps::metrics::Sink& sink) {
    absl::MutexLock lock(&mu_);
    for (const ps::rpc::EtcdEndpoint& e : view_.etcd()) {
      sink.Gauge("ps_coordinator_etcd_healthy",
                 "1 when the etcd member answered the last status request (every second)",
                 {{"endpoint", e.endpoint()}}, e.healthy() ? 1 : 0);
      if (e.healthy()) {
        sink.Gauge("ps_coordinator_etcd_latency_seconds",
                   "Round trip of the last status request to the etcd member",
                   {{"endpoint", e.endpoint()}}, e.latency_ms() / 1000);
      }
    }
    sink.Counter("ps_coordinator_etcd_requests_total",
                 "HTTP requests to etcd (each endpoint tried counts)", {},
                 static_cast<double>(etcd_->requests()));
    sink.Counter("ps_coordinator_etcd_writes_total",
                 "Writes to etcd: state and rendezvous transactions, lease grants and revocations",
                 {}, static_cast<double>(etcd_->writes()));
    sink.Gauge("ps_coordinator_standbys", "Coordinators standing by, as etcd lists them", {},
               view_.standbys_size());
  }

  ps::coordinator::EtcdClient* const etcd_;
  ps::coordinator::LeaderElection* const election_;
  const std::string prefix_;
  ps::metrics::Gauge* is_leader_ = nullptr;
  ps::metrics::Counter* terms_ = nullptr;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ps::coordinator::LeaderElection::Term> term_ ABSL_GUARDED_BY(mu_);
  ps::rpc::Leadership view_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// How a term of serving ended.
struct Served {
  int exit_code = 0;
  bool lost_lead = false;  // with an election: this coordinator no longer leads
};

// Serves the job on the listener's port: as the only coordinator (`election` null; `store` the
// --data_dir's, or null) until a signal or the job's failure, or as the leader until then or
// until it no longer leads.
Served Serve(const Setup& setup, ps::coordinator::StateStore* store,
             ps::coordinator::LeaderElection* election, ps::metrics::Registry* registry,
             CurrentCoordinator* current, Listener* listener, LeadershipView* view = nullptr) {
  ps::coordinator::CoordinatorOptions options;
  bool carrying_on = false;
  if (store != nullptr) {
    absl::StatusOr<std::optional<ps::coordinator::SavedCoordinator>> saved = store->Load();
    if (!saved.ok() && election != nullptr) {
      // etcd lost its quorum just after the election: try again in a later term.
      std::fprintf(stderr, "ps_coordinator: cannot read the job's state (%s)\n",
                   saved.status().ToString().c_str());
      return Served{0, true};
    }
    carrying_on = saved.ok() && saved->has_value();
    options.store = store;
  }
  // A job restored from a checkpoint starts only from one that is intact and fits it: the quick
  // checks here, the files' checksums (a read of every file) below, while the servers load.
  std::optional<ps::coordinator::RestorePoint> to_verify;
  const std::string& restore = setup.restore;
  if (!restore.empty() && carrying_on) {
    std::fprintf(stderr,
                 "ps_coordinator: the %s holds the running job, which carries on: the "
                 "checkpoint %s is not restored\n",
                 election != nullptr ? "etcd prefix" : "data_dir", restore.c_str());
  } else if (!restore.empty()) {
    const absl::Time start = absl::Now();
    absl::StatusOr<ps::coordinator::RestorePoint> point =
        ps::coordinator::CheckRestorable(restore, setup.job);
    if (!point.ok()) {
      std::fprintf(stderr, "ps_coordinator: cannot restore from %s: %s\n", restore.c_str(),
                   point.status().ToString().c_str());
      return Served{1, false};
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
  options.job = setup.job;
  options.heartbeat_interval = setup.heartbeat_interval;
  options.dead_after = setup.dead_after;
  // A failed job wakes main, which tells the members and exits.
  options.on_job_failed = [](const ps::rpc::JobFailure&) { WakeMain(); };
  if (store != nullptr && store->shared()) {
    // What this coordinator holds may not be the job's state any more: it stops answering at
    // once (the leadership check below) and hands over.
    options.on_store_failed = [](const absl::Status& why) {
      absl::MutexLock lock(&g_wakeup.mu);
      g_wakeup.store_failed = true;
      g_wakeup.store_error = why;
    };
  }
  absl::StatusOr<std::unique_ptr<ps::coordinator::Coordinator>> coordinator =
      ps::coordinator::Coordinator::Create(std::move(options));
  if (!coordinator.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", coordinator.status().ToString().c_str());
    return Served{2, false};
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
                                              setup.security.channel_credentials);
  service.SetMetrics(registry);
  if (election != nullptr) {
    service.SetLeadershipCheck([election]() -> absl::Status {
      {
        absl::MutexLock lock(&g_wakeup.mu);
        if (g_wakeup.store_failed) {
          return absl::UnavailableError(
              absl::StrCat("coordinator is no longer the leader: its write to etcd failed (",
                           g_wakeup.store_error.message(), ")"));
        }
      }
      return election->CheckLeading();
    });
  }
  if (view != nullptr) {
    service.SetStatusExtra([view](ps::rpc::ClusterStatus* status) { view->Fill(status); });
  }
  ps::grpc_util::ServerOptions server_options = CoordinatorServerOptions(setup, listener->port);
  if (ps::MetricsEndpointWanted()) {
    server_options.interceptors.push_back(
        ps::metrics::MakeServerMetricsInterceptorFactory(registry, "ps_coordinator"));
  }
  absl::StatusOr<ps::grpc_util::StartedServer> started =
      ps::grpc_util::StartServer(std::move(server_options), {&service});
  if (!started.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", std::string(started.status().message()).c_str());
    return Served{1, false};
  }
  std::unique_ptr<grpc::Server> server = std::move(started->server);
  // Members taken up from the store are judged by their heartbeats from now on, not from when
  // the state was read.
  (*coordinator)->StartServing();
  {
    absl::MutexLock lock(&current->mu);
    current->coordinator = coordinator->get();
  }
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

  Served served;
  absl::Duration shutdown_grace = kShutdownGrace;
  const absl::Status written = Announce(setup, listener, started->port);
  if (written.ok()) {
    bool job_failed = false;
    {
      // Woken by a signal or the job's failure; with an election, also looks every 20 ms at
      // whether this coordinator still leads.
      absl::MutexLock lock(&g_wakeup.mu);
      while (!g_wakeup.stop && !g_wakeup.job_failed) {
        if (election != nullptr) {
          if (g_wakeup.store_failed) break;
          g_wakeup.mu.Unlock();
          const bool leading = election->CheckLeading().ok();
          g_wakeup.mu.Lock();
          if (!leading) break;
          g_wakeup.mu.AwaitWithTimeout(absl::Condition(
                                           +[](Wakeup* w) {
                                             w->mu.AssertHeld();
                                             return w->stop || w->job_failed || w->store_failed;
                                           },
                                           &g_wakeup),
                                       absl::Milliseconds(20));
        } else {
          g_wakeup.mu.Await(absl::Condition(
              +[](Wakeup* w) {
                w->mu.AssertHeld();
                return w->stop || w->job_failed;
              },
              &g_wakeup));
        }
      }
      job_failed = g_wakeup.job_failed;
      served.lost_lead = !g_wakeup.stop && !g_wakeup.job_failed;
      if (served.lost_lead && g_wakeup.store_failed) {
        std::fprintf(stderr, "ps_coordinator: a write to etcd failed: %s\n",
                     g_wakeup.store_error.ToString().c_str());
      }
      g_wakeup.job_failed = false;
      g_wakeup.store_failed = false;
    }
    if (const std::optional<ps::rpc::JobFailure> failure = (*coordinator)->failure();
        failure.has_value() && job_failed) {
      // Every live member hears of it with its next heartbeat's answer; a member that never
      // heartbeats again is found dead within dead_after.
      const absl::Time start = absl::Now();
      const bool told =
          (*coordinator)->AwaitFailureTold(setup.dead_after + 2 * setup.heartbeat_interval);
      std::fprintf(stderr, "ps_coordinator: the job failed: %s; %s in %.1f s; exiting\n",
                   ps::DescribeJobFailure(*failure).c_str(),
                   told ? "every live member was told" : "not every live member could be told",
                   absl::ToDoubleSeconds(absl::Now() - start));
      served.exit_code = restore_refused ? 1 : kJobFailedExit;
      served.lost_lead = false;
      shutdown_grace = kFailedShutdownGrace;
    } else if (!served.lost_lead) {
      std::fprintf(stderr, "ps_coordinator: shutting down\n");
    }
  } else {
    std::fprintf(stderr, "ps_coordinator: %s\n", written.ToString().c_str());
    served.exit_code = 1;
  }
  // A coordinator that lost the lead answers nothing more (the leadership check answers its calls
  // in flight UNAVAILABLE, which members take as a cue to find the leader); they get a second to
  // be answered so, rather than be cancelled.
  if (served.lost_lead) shutdown_grace = kFailedShutdownGrace;

  stop_verifying = true;
  if (verifier.joinable()) verifier.join();
  {
    absl::MutexLock lock(&current->mu);
    current->coordinator = nullptr;
  }
  // End pending waits first so that the server's shutdown does not wait for their deadlines.
  (*coordinator)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(shutdown_grace));
  server.reset();
  // The coordinator goes last, at return, after the service declared after it: the service's
  // checkpoint scheduler cancels its wait on the coordinator as it stops (freeing the coordinator
  // here first was a use after free ASan found).
  return served;
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

  if (!absl::GetFlag(FLAGS_etcd).empty() && !absl::GetFlag(FLAGS_data_dir).empty()) {
    std::fprintf(stderr,
                 "ps_coordinator: --etcd and --data_dir exclude each other: with --etcd the "
                 "state lives in etcd\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_lease_ttl_s) < 1) {
    std::fprintf(stderr, "ps_coordinator: --lease_ttl_s must be >= 1, got %d\n",
                 absl::GetFlag(FLAGS_lease_ttl_s));
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
  // STANDARDIZE columns without their moments get them here, once, from the training data, so
  // that every worker is handed the job with the same values.
  if (ps::NeedsDenseMoments(*job) && !absl::GetFlag(FLAGS_dry_run)) {
    if (!absl::GetFlag(FLAGS_check_data)) {
      std::fprintf(stderr,
                   "%s: data.schema has STANDARDIZE columns without mean and stddev, which the "
                   "coordinator computes from the training data; with --check_data=false it does "
                   "not read the data: give the moments in the job\n",
                   job_path.c_str());
      return 1;
    }
    ps::DenseMomentsReport moments;
    if (const absl::Status filled = ps::FillDenseMoments(&*job, {}, &moments); !filled.ok()) {
      std::fprintf(stderr, "%s: %s\n", job_path.c_str(), std::string(filled.message()).c_str());
      return 1;
    }
    for (const std::string& line : moments.lines) {
      std::fprintf(stderr, "ps_coordinator: %s\n", line.c_str());
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

  const std::string etcd_endpoints = absl::GetFlag(FLAGS_etcd);
  std::string restore = ps::coordinator::RestorePathOf(absl::GetFlag(FLAGS_restore), *job);
  Setup setup{*std::move(job), *address,  heartbeat_interval,
              dead_after,      *security, std::move(restore)};
  // Before any coordinator exists: a restored state may fail the job early.
  if (const absl::Status signals = InstallSignalHandlers(); !signals.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", signals.ToString().c_str());
    return 1;
  }
  ps::metrics::Registry registry;
  CurrentCoordinator current;
  ps::coordinator::AddCoordinatorCollector(&registry,
                                           [&current]() -> std::optional<ps::rpc::ClusterStatus> {
                                             absl::MutexLock lock(&current.mu);
                                             if (current.coordinator == nullptr)
                                               return std::nullopt;
                                             return current.coordinator->Status();
                                           });
  absl::StatusOr<std::unique_ptr<ps::metrics::MetricsEndpoint>> metrics_endpoint =
      ps::StartMetricsEndpointFromFlags("ps_coordinator", &registry);
  if (!metrics_endpoint.ok()) {
    std::fprintf(stderr, "%s\n", std::string(metrics_endpoint.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "ps_coordinator: gRPC security: %s\n",
               setup.security.security.Describe().c_str());
  Listener listener{setup.address.listen.port, false};

  if (etcd_endpoints.empty()) {
    std::unique_ptr<ps::coordinator::CoordinatorStore> store;
    if (const std::string data_dir = absl::GetFlag(FLAGS_data_dir); !data_dir.empty()) {
      absl::StatusOr<std::unique_ptr<ps::coordinator::CoordinatorStore>> opened =
          ps::coordinator::CoordinatorStore::Open(data_dir);
      if (!opened.ok()) {
        std::fprintf(stderr, "ps_coordinator: %s\n", opened.status().ToString().c_str());
        return 1;
      }
      store = *std::move(opened);
    }
    std::thread signal_watcher([] { WatchSignals(nullptr); });
    const Served served = Serve(setup, store.get(), nullptr, &registry, &current, &listener);
    StopSignalWatcher();
    signal_watcher.join();
    metrics_endpoint->reset();
    return served.exit_code;
  }

  // Several coordinators: stand by until this one leads, lead until it no longer does, again.
  // A renewal that hangs on one member must leave time for the others within the lease.
  ps::coordinator::EtcdClientOptions etcd_options;
  etcd_options.request_timeout =
      std::min(absl::Seconds(1), absl::Seconds(absl::GetFlag(FLAGS_lease_ttl_s)) / 4);
  absl::StatusOr<std::unique_ptr<ps::coordinator::EtcdClient>> etcd =
      ps::coordinator::EtcdClient::Create(etcd_endpoints, etcd_options);
  if (!etcd.ok()) {
    std::fprintf(stderr, "ps_coordinator: --etcd: %s\n", etcd.status().ToString().c_str());
    return 2;
  }
  std::string prefix = absl::GetFlag(FLAGS_etcd_prefix);
  if (prefix.empty()) prefix = absl::StrCat("/ps/", setup.job.name(), "/");
  if (prefix.back() != '/') prefix += '/';
  // The address members dial: the port is known once the first server bound it.
  std::unique_ptr<ps::coordinator::StandbyService> standby;
  std::unique_ptr<grpc::Server> standby_server;
  std::atomic<ps::coordinator::LeaderElection*> election_ptr{nullptr};  // read by gRPC threads
  const std::function<absl::Status()> why_standby = [&election_ptr] {
    ps::coordinator::LeaderElection* e = election_ptr.load();
    return e == nullptr ? absl::UnavailableError("coordinator is starting") : e->CheckLeading();
  };
  absl::Status started = StartStandby(setup, why_standby, &listener, &standby_server, &standby);
  if (!started.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", started.ToString().c_str());
    return 1;
  }
  const std::string self = ps::JoinHostPort(setup.address.advertise, listener.port);
  ps::coordinator::LeaderElectionOptions election_options;
  election_options.prefix = prefix;
  election_options.address = self;
  election_options.lease_ttl_s = absl::GetFlag(FLAGS_lease_ttl_s);
  absl::StatusOr<std::unique_ptr<ps::coordinator::LeaderElection>> election =
      ps::coordinator::LeaderElection::Create(etcd->get(), election_options);
  if (!election.ok()) {
    std::fprintf(stderr, "ps_coordinator: %s\n", election.status().ToString().c_str());
    return 2;
  }
  election_ptr.store(election->get());
  LeadershipView view(etcd->get(), election->get(), prefix, &registry);
  // A signal ends the campaign; the term being served ends through Serve's own wait.
  std::thread signal_watcher([&election] { WatchSignals([&election] { (*election)->Stop(); }); });
  auto stopping = [] {
    absl::MutexLock lock(&g_wakeup.mu);
    return g_wakeup.stop;
  };
  int exit_code = 0;
  while (!stopping()) {
    std::fprintf(stderr, "ps_coordinator: %s stands by (etcd %s, prefix %s)\n", self.c_str(),
                 etcd_endpoints.c_str(), prefix.c_str());
    absl::StatusOr<ps::coordinator::LeaderElection::Term> term = (*election)->Campaign();
    if (!term.ok()) break;  // stopping
    standby_server->Shutdown(std::chrono::system_clock::now());
    standby_server.reset();
    std::fprintf(stderr, "ps_coordinator: %s leads (term %lld of the job)\n", self.c_str(),
                 static_cast<long long>(term->number));
    view.TookOffice(*term);
    ps::coordinator::EtcdStateStore store(etcd->get(), prefix, prefix + "leader",
                                          term->leader_revision,
                                          absl::Seconds(absl::GetFlag(FLAGS_lease_ttl_s)));
    const Served served =
        Serve(setup, &store, election->get(), &registry, &current, &listener, &view);
    view.LeftOffice();
    if (!served.lost_lead) {
      exit_code = served.exit_code;
      break;
    }
    (*election)->Resign((*election)->CheckLeading());
    std::fprintf(stderr, "ps_coordinator: %s no longer leads; standing by again\n", self.c_str());
    started = StartStandby(setup, why_standby, &listener, &standby_server, &standby);
    if (!started.ok()) {
      std::fprintf(stderr, "ps_coordinator: %s\n", started.ToString().c_str());
      exit_code = 1;
      break;
    }
  }
  // Whatever ended the loop, the signal watcher must end too.
  StopSignalWatcher();
  signal_watcher.join();
  if (standby_server != nullptr) standby_server->Shutdown(std::chrono::system_clock::now());
  view.Stop();
  metrics_endpoint->reset();
  election->reset();  // resigns: a standby takes over at once
  return exit_code;
}
