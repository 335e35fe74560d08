// ps_server: a parameter-server daemon.
//
//   ps_server --coordinator=HOST:PORT[,HOST:PORT...] [--listen=0.0.0.0:0] [--advertise=HOST]
//             [--port_file=PATH] [--metrics_listen=HOST:PORT] [--metrics_port_file=PATH]
//             [--connect_timeout_s=45]
//             [--hot_keys_sample_every=128] [--lookup_threads=-1] [--tls_cert=PEM --tls_key=PEM]
//             [--tls_ca=PEM] [--token_file=PATH] [--shared_memory_mb=1024]
//             [--shared_memory_idle_s=600] [--memory_budget_mb=0]
//             [--tier_dir=PATH --tier_max_disk_gb=N] [--dry_run]
//             [resource bounds, below]
//
// It lends clients on its host up to --shared_memory_mb of shared memory for the payloads of
// pulls and pushes and for the calls themselves (server/shared_regions.h, proto/ps.proto rules 9
// and 10); 0 lends none.
//
// With --tls_cert and --tls_key it serves TLS, with --tls_ca mutual TLS, and with --token_file
// it checks every call's bearer token (common/grpc/security.h); its own calls (to the
// coordinator, and replication to the other servers) use the same certificate and present the
// file's admin token.
//
// Resource bounds (server/README.md): --max_inflight_requests, --max_inflight_bytes,
// --max_inflight_requests_per_peer, --max_inflight_bytes_per_peer (server/admission.h; over them
// a request is refused RESOURCE_EXHAUSTED at once), --max_concurrent_streams,
// --grpc_memory_quota_bytes, --max_connection_idle_s, --keepalive_s (common/grpc/server_builder.h).
// A value out of range is refused at start-up and by --dry_run (exit 2).
//
// Binds --listen (port 0 picks a free one; the bound port is printed and written to --port_file),
// registers with the coordinator under its advertised address (ADVERTISED_HOST:PORT, which clients
// and the other servers dial), which hands it the job and, once every server of the job has
// registered, the shard map; then serves the shards whose primary it is. SIGTERM or SIGINT stops it
// cleanly (exit 0). In a job restored from a checkpoint it loads its shards from there before it
// serves; when that fails it says why and exits with status 1. When the job fails (a worker
// failed: the coordinator's answer to a heartbeat says so) it says which worker and why, and
// exits with status 1.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/checkpoint_catalog.h"
#include "common/coordinator_client.h"
#include "common/daemon_flags.h"
#include "common/grpc/security_flags.h"
#include "common/grpc/server_builder.h"
#include "common/metrics/grpc_server_metrics.h"
#include "common/metrics/http_endpoint.h"
#include "common/metrics/registry.h"
#include "common/net_address.h"
#include "common/port_file.h"
#include "common/process_tuning.h"
#include "common/shared_region_layout.h"
#include "common/signals.h"
#include "server/admission.h"
#include "server/checkpoint/server_checkpoint.h"
#include "server/ps_service.h"
#include "server/registered_workers.h"
#include "server/server_metrics.h"
#include "server/sharded_store.h"
#include "server/shared_regions.h"
#include "server/storage/row_tier.h"

ABSL_FLAG(std::string, coordinator, "",
          "host:port, or several comma-separated: the job's coordinators (required)");
ABSL_FLAG(std::string, port_file, "", "if set, the bound port is written to this file");
ABSL_FLAG(bool, empty_handler, false,
          "answer requests without touching storage (to measure the transport; benchmarks only)");
ABSL_FLAG(uint32_t, hot_keys_sample_every, 128,
          "hot keys (ps_ctl hotkeys): one key of a request in this many is counted into its "
          "table's hot-keys sketches; 1 counts every key (exact, slowest), 0 none");
ABSL_FLAG(int, lookup_threads, -1,
          "threads that serve the shards of one large pull or push side by side (from 16384 "
          "keys); -1: one less than the machine's cores, at most 7; 0: none");
ABSL_FLAG(int64_t, memory_budget_mb, 0,
          "the server's resident memory budget in MiB: its tables' rows are capped and evicted "
          "to stay within it (server/README.md#memory-budget); 0: none");
ABSL_FLAG(std::string, tier_dir, "",
          "a directory for the disk tier: rows the memory budget moves out of memory are kept "
          "there (RocksDB) and read back when used (server/README.md#tier); needs "
          "--memory_budget_mb and --tier_max_disk_gb. Emptied at start; empty: no tier");
ABSL_FLAG(double, tier_max_disk_gb, 0,
          "the most disk the tier may use, in GiB (> 0 with --tier_dir): past it, rows leaving "
          "memory are dropped as without a tier");
ABSL_FLAG(int, connect_timeout_s, 45,
          "how long to wait for the coordinator, at start and when it is away later (a "
          "coordinator restarting from its data_dir); then the server exits with status 1");

ABSL_FLAG(int64_t, max_inflight_requests, 4096,
          "requests (Pull, Push, PullDense, PushDense) in flight on this server; more are refused "
          "RESOURCE_EXHAUSTED at once; 0: no limit");
ABSL_FLAG(int64_t, max_inflight_bytes, int64_t{2} << 30,
          "request bytes in flight on this server (one request bigger than this is admitted "
          "alone); 0: no limit");
ABSL_FLAG(int64_t, max_inflight_requests_per_peer, 512,
          "requests in flight from one gRPC peer (one client connection); 0: no limit; at most "
          "--max_inflight_requests");
ABSL_FLAG(int64_t, max_inflight_bytes_per_peer, int64_t{1} << 30,
          "request bytes in flight from one gRPC peer; 0: no limit; at most --max_inflight_bytes");
ABSL_FLAG(int, max_concurrent_streams, 1024,
          "calls at once on one connection (HTTP/2 streams; a client over it waits); > 0");
ABSL_FLAG(int64_t, grpc_memory_quota_bytes, 0,
          "bytes gRPC may hold for this server's connections (a grpc::ResourceQuota: over it gRPC "
          "shrinks buffers and drops connections); 0: no quota");
ABSL_FLAG(int, max_connection_idle_s, 1800,
          "a connection with no call for this long is closed (clients reconnect); > 0");
ABSL_FLAG(int64_t, shared_memory_mb, 1024,
          "MiB of shared memory this server may lend to clients on its host for the payloads of "
          "pulls and pushes and the calls themselves (proto/ps.proto rules 9 and 10; clients "
          "elsewhere use the sockets); 0: none");
ABSL_FLAG(int, shared_memory_idle_s, 600,
          "a lent region that no request named for this long is closed at the next one lent; > 0");
ABSL_FLAG(int, keepalive_s, 60,
          "ping a connection silent for this long and drop it when no answer comes within 20 s "
          "(a client whose host or network died); > 0");

namespace ps {
namespace {

// The resource bounds from the flags: the admission limits and the gRPC server's; INVALID_ARGUMENT
// naming the flag for a value out of range.
absl::Status BoundsFromFlags(server::AdmissionLimits* limits,
                             grpc_util::ServerOptions* server_options) {
  limits->max_requests = absl::GetFlag(FLAGS_max_inflight_requests);
  limits->max_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  limits->max_requests_per_peer = absl::GetFlag(FLAGS_max_inflight_requests_per_peer);
  limits->max_bytes_per_peer = absl::GetFlag(FLAGS_max_inflight_bytes_per_peer);
  if (absl::Status valid = server::ValidateAdmissionLimits(*limits); !valid.ok()) return valid;
  const int streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  const int64_t quota = absl::GetFlag(FLAGS_grpc_memory_quota_bytes);
  const int idle_s = absl::GetFlag(FLAGS_max_connection_idle_s);
  const int keepalive_s = absl::GetFlag(FLAGS_keepalive_s);
  if (streams <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max_concurrent_streams must be > 0, got %d", streams));
  }
  if (quota < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--grpc_memory_quota_bytes must be >= 0 (0: no quota), got %d", quota));
  }
  if (idle_s <= 0 || idle_s > std::numeric_limits<int>::max() / 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max_connection_idle_s must be in [1, 2147483], got %d", idle_s));
  }
  if (keepalive_s <= 0 || keepalive_s > std::numeric_limits<int>::max() / 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--keepalive_s must be in [1, 2147483], got %d", keepalive_s));
  }
  server_options->max_concurrent_streams = streams;
  server_options->memory_quota_bytes = quota > 0 ? quota : -1;
  server_options->max_connection_idle_ms = idle_s * 1000;
  server_options->keepalive_time_ms = keepalive_s * 1000;
  server_options->keepalive_timeout_ms = 20 * 1000;
  return absl::OkStatus();
}

// The shared-memory lending from the flags; INVALID_ARGUMENT naming the flag out of range.
absl::Status SharedMemoryFromFlags(server::SharedRegions::Options* options) {
  const int64_t mb = absl::GetFlag(FLAGS_shared_memory_mb);
  const int idle_s = absl::GetFlag(FLAGS_shared_memory_idle_s);
  if (mb < 0 || mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--shared_memory_mb must be in [0, 1073741824] (0: none), got %d", mb));
  }
  if (idle_s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--shared_memory_idle_s must be > 0, got %d", idle_s));
  }
  options->max_bytes = static_cast<uint64_t>(mb) << 20;
  options->idle_timeout = absl::Seconds(idle_s);
  return absl::OkStatus();
}

// --lookup_threads: -1 picks one less than the machine's cores, at most 7; INVALID_ARGUMENT
// below -1 or above 256.
absl::StatusOr<int> LookupThreads(int flag) {
  if (flag < -1 || flag > 256) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--lookup_threads must be -1 (automatic) or in [0, 256], got %d", flag));
  }
  if (flag >= 0) return flag;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores - 1, 0, 7);
}

// Fetches newer shard maps in the background by always waiting on the coordinator for the next
// version; a request that shows a newer one exists cuts short the pause after a failed call.
//
// A map that cannot be installed (a restored job whose checkpoint cannot be loaded) is fatal: the
// follower stops, prints why and calls `on_fatal`; the server must not serve empty shards in place
// of the checkpoint's.
class MapFollower {
 public:
  MapFollower(CoordinatorClient* coordinator, server::ShardedStore* store, uint32_t server_id,
              std::function<void()> on_fatal)
      : coordinator_(coordinator),
        store_(store),
        server_id_(server_id),
        on_fatal_(std::move(on_fatal)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~MapFollower() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  void Poke() {
    absl::MutexLock lock(&mu_);
    poked_ = true;
  }

 private:
  // Always waiting on the coordinator for the next version, so that a change (a dead replica
  // dropped, a promotion) arrives at once. A call that fails fast (the coordinator is away) is
  // tried again after a pause, or at once when poked.
  void Run() {
    constexpr absl::Duration kPoll = absl::Seconds(1);
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return;
        poked_ = false;
      }
      // A map held back (its checkpoint's files still being checked) counts as seen.
      const uint64_t have = std::max(store_->map_version(), held_.map_version);
      const absl::Time started = absl::Now();
      absl::StatusOr<rpc::ShardMap> map = coordinator_->GetShardMap(have + 1, kPoll);
      if (map.ok()) {
        const absl::Status installed =
            server::InstallShardMap(store_, *map, server_id_, CheckpointReadThreads(), &held_);
        if (installed.ok()) continue;
        std::fprintf(stderr, "ps_server %u: cannot install shard map %llu: %s\n", server_id_,
                     static_cast<unsigned long long>(map->version()), installed.ToString().c_str());
        on_fatal_();
        return;
      }
      if (absl::Now() - started >= kPoll / 2) continue;  // the wait ran out: nothing new
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || poked_; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(200));
    }
  }

  CoordinatorClient* const coordinator_;
  server::ShardedStore* const store_;
  const uint32_t server_id_;
  const std::function<void()> on_fatal_;
  // Only the follower's thread touches it.
  server::HeldRestore held_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// How long a push from a worker id this server does not know yet waits for the coordinator's
// word; then it is answered UNAVAILABLE, which clients retry.
constexpr absl::Duration kMemberIdsTimeout = absl::Seconds(2);

int Main() {
  const std::string coordinator_address = absl::GetFlag(FLAGS_coordinator);
  if (coordinator_address.empty()) {
    std::fprintf(stderr, "ps_server: --coordinator is required\n");
    return 2;
  }
  if (const absl::StatusOr<std::vector<std::string>> parsed =
          ParseCoordinatorAddresses(coordinator_address);
      !parsed.ok()) {
    std::fprintf(stderr, "ps_server: --coordinator: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  const absl::StatusOr<DaemonAddress> own = DaemonAddressFromFlags();
  if (!own.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(own.status().message()).c_str());
    return 2;
  }
  const HostPort& listen = own->listen;
  const absl::StatusOr<int> lookup_threads = LookupThreads(absl::GetFlag(FLAGS_lookup_threads));
  if (!lookup_threads.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(lookup_threads.status().message()).c_str());
    return 2;
  }
  const int64_t memory_budget_mb = absl::GetFlag(FLAGS_memory_budget_mb);
  if (memory_budget_mb < 0 || memory_budget_mb > (int64_t{1} << 30)) {
    std::fprintf(stderr, "ps_server: --memory_budget_mb must be in [0, 2^30] (0: none), got %lld\n",
                 static_cast<long long>(memory_budget_mb));
    return 2;
  }
  const std::string tier_dir = absl::GetFlag(FLAGS_tier_dir);
  const double tier_max_disk_gb = absl::GetFlag(FLAGS_tier_max_disk_gb);
  if (!tier_dir.empty()) {
    // Checked before registering: a tier that cannot work stops the server at once.
    if (memory_budget_mb == 0) {
      std::fprintf(stderr,
                   "ps_server: --tier_dir holds the rows that the memory budget moves out of "
                   "memory: set --memory_budget_mb too\n");
      return 2;
    }
    if (!(tier_max_disk_gb > 0) || tier_max_disk_gb > (int64_t{1} << 20)) {
      std::fprintf(stderr,
                   "ps_server: --tier_max_disk_gb must be > 0 (and at most 2^20) with --tier_dir, "
                   "got %g\n",
                   tier_max_disk_gb);
      return 2;
    }
    const absl::Status writable = server::RowTier::CheckDirectory(tier_dir);
    if (!writable.ok()) {
      std::fprintf(stderr, "ps_server: %s\n", std::string(writable.message()).c_str());
      return 2;
    }
  } else if (tier_max_disk_gb != 0) {
    std::fprintf(stderr, "ps_server: --tier_max_disk_gb is the cap of a tier: set --tier_dir\n");
    return 2;
  }
  const int connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout_s);
  if (connect_timeout_s <= 0) {
    std::fprintf(stderr, "ps_server: --connect_timeout_s must be > 0, got %d\n", connect_timeout_s);
    return 2;
  }
  const absl::StatusOr<grpc_util::DaemonSecurity> security =
      grpc_util::DaemonSecurityFromFlags("ps_server");
  if (!security.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(security.status().message()).c_str());
    return 2;
  }
  server::AdmissionLimits admission_limits;
  grpc_util::ServerOptions server_options;
  if (const absl::Status bounds = BoundsFromFlags(&admission_limits, &server_options);
      !bounds.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(bounds.message()).c_str());
    return 2;
  }
  server::SharedRegions::Options shared_options;
  if (const absl::Status shared = SharedMemoryFromFlags(&shared_options); !shared.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(shared.message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_dry_run)) {
    if (const absl::Status can_listen = CheckCanListenFromFlags(listen); !can_listen.ok()) {
      std::fprintf(stderr, "ps_server: %s\n", std::string(can_listen.message()).c_str());
      return 1;
    }
    std::printf("ok: ps_server would listen on %s and advertise %s\n",
                JoinHostPort(listen.host, listen.port).c_str(), own->advertise.c_str());
    return 0;
  }

  std::atomic<MapFollower*> follower{nullptr};
  server::ParameterServerService service([&follower](uint64_t) {
    if (MapFollower* f = follower.load()) f->Poke();
  });

  // Calls made in the regions (rule 10) are served as the RPCs are.
  shared_options.serve_call = [&service](server::SharedRegions::Call call) {
    service.ServeSharedCall(std::move(call));
  };
  shared_options.pool_threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 2, 8);
  // Metrics: every call by method and code (the interceptor, and the calls made in the regions,
  // also counted in ps_server_shared_calls_total), the store's figures at scrape time.
  metrics::Registry registry;
  metrics::CallMetrics pull_calls(&registry, "ps_server", "Pull");
  metrics::CallMetrics push_calls(&registry, "ps_server", "Push");
  metrics::Counter* shared_calls = registry.GetCounter(
      "ps_server_shared_calls_total",
      "Pulls and pushes made in shared memory by clients on this host (counted in "
      "ps_server_rpcs_total too).");
  shared_options.on_answered = [&pull_calls, &push_calls, shared_calls](
                                   uint32_t method, absl::StatusCode code, absl::Duration took) {
    shared_calls->Increment();
    if (method == kSharedCallPull || method == kSharedCallPush) {
      (method == kSharedCallPull ? pull_calls : push_calls)
          .Record(static_cast<int>(code), absl::ToDoubleSeconds(took));
    }
  };
  server::SharedRegions shared_regions(shared_options);
  if (shared_options.max_bytes > 0) service.SetSharedRegions(&shared_regions);
  std::atomic<server::ShardedStore*> metrics_store{nullptr};
  server::AddServerCollector(
      &registry, [&metrics_store, &shared_regions](rpc::ServerStatus* status) {
        server::ShardedStore* store = metrics_store.load(std::memory_order_acquire);
        if (store == nullptr) return false;
        store->FillStatus(status);
        shared_regions.FillStatus(status);
        return true;
      });
  service.SetCheckpointDurations(
      registry.GetHistogram("ps_server_checkpoint_duration_seconds",
                            "Time this server took to write its shards of a checkpoint.",
                            metrics::ExponentialBuckets(0.01, 2, 16)));

  server::Admission admission(admission_limits);
  service.SetAdmission(&admission);
  server_options.listen_address = JoinHostPort(listen.host, listen.port);
  // The job's own limit (max_message_bytes, at most 1 GiB) is enforced by the store with a clear
  // error; gRPC's limit only has to be above it, and refuses anything larger from its length
  // prefix, before buffering it.
  server_options.max_receive_message_bytes = (1 << 30) + (1 << 20);
  server_options.max_send_message_bytes = std::numeric_limits<int>::max();
  server_options.int_args = {{GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20},
                             {GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20}};
  server_options.credentials = security->server_credentials;
  if (MetricsEndpointWanted()) {  // no cost on the data path without
    server_options.interceptors.push_back(
        metrics::MakeServerMetricsInterceptorFactory(&registry, "ps_server"));
  }
  absl::StatusOr<grpc_util::StartedServer> started =
      grpc_util::StartServer(std::move(server_options), {&service});
  if (!started.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", std::string(started.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<grpc::Server> grpc_server = std::move(started->server);
  const int port = started->port;
  const std::string address = JoinHostPort(own->advertise, port);
  absl::StatusOr<std::unique_ptr<metrics::MetricsEndpoint>> metrics_endpoint =
      StartMetricsEndpointFromFlags("ps_server", &registry);
  if (!metrics_endpoint.ok()) {
    std::fprintf(stderr, "%s\n", std::string(metrics_endpoint.status().message()).c_str());
    return 1;
  }

  absl::StatusOr<std::unique_ptr<CoordinatorClient>> coordinator = CoordinatorClient::Connect(
      coordinator_address, absl::Seconds(connect_timeout_s), security->channel_credentials);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  // A coordinator restarting from its data_dir is waited for (heartbeats and the map follower
  // keep trying on their own).
  (*coordinator)->SetRetryWindow(absl::Seconds(connect_timeout_s));
  absl::StatusOr<rpc::RegisterResponse> registration =
      (*coordinator)->Register(rpc::SERVER, address, -1);
  if (!registration.ok()) {
    std::fprintf(stderr, "ps_server: registration failed: %s\n",
                 registration.status().ToString().c_str());
    return 1;
  }
  const uint32_t server_id = static_cast<uint32_t>(registration->rank());
  // Records of the shards this server is primary of go to their copies on other servers.
  std::unique_ptr<server::ReplicationTransport> replication =
      server::NewGrpcReplicationTransport(absl::Seconds(30), security->channel_credentials);
  server::ShardedStore::Options options;
  options.empty_handler = absl::GetFlag(FLAGS_empty_handler);
  options.hot_keys_sample_every = absl::GetFlag(FLAGS_hot_keys_sample_every);
  options.lookup_threads = *lookup_threads;
  options.memory_budget_bytes = memory_budget_mb << 20;
  options.tier_dir = tier_dir;
  options.tier_max_disk_bytes = static_cast<int64_t>(tier_max_disk_gb * (1 << 30));
  options.replication_transport = replication.get();
  options.server_id = server_id;
  // A copy that cannot be reached is reported, so that the coordinator fails it over at once.
  CoordinatorClient* const coordinator_client = coordinator->get();
  const uint32_t member_id = registration->member_id();
  options.on_unreachable = [coordinator_client, member_id](uint32_t server,
                                                           const absl::Status& error) {
    coordinator_client->ReportFailureAsync(member_id, server, std::string(error.message()));
  };
  // A copy that caught up becomes a replica on this primary's word: say it at once.
  options.on_caught_up = [coordinator_client] { coordinator_client->HeartbeatSoon(); };
  absl::StatusOr<std::unique_ptr<server::ShardedStore>> store =
      server::ShardedStore::Create(registration->job(), options);
  if (!store.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", store.status().ToString().c_str());
    return 1;
  }
  // Heartbeats carry the progress of every shard copy: failovers promote the most advanced.
  server::ShardedStore* const store_ptr = store->get();
  (*coordinator)->SetShardProgressSource([store_ptr] { return store_ptr->Progress(); });
  // A server whose coordinator is gone for good stops, rather than serve a map nobody keeps.
  std::atomic<bool> failed{false};
  (*coordinator)
      ->SetOnCoordinatorLost(
          absl::Seconds(connect_timeout_s),
          [&failed, server_id, coordinator_address, connect_timeout_s](const absl::Status& error) {
            std::fprintf(stderr,
                         "ps_server %u: the coordinator at %s has not answered for %d s (%s); "
                         "exiting\n",
                         server_id, coordinator_address.c_str(), connect_timeout_s,
                         error.ToString().c_str());
            failed.store(true);
            kill(getpid(), SIGTERM);  // the main thread's shutdown path, then exit status 1
          });
  // A job whose worker failed cannot go on: say why and stop, rather than serve nobody.
  (*coordinator)->SetOnJobFailed([&failed, server_id](const rpc::JobFailure& failure) {
    std::fprintf(stderr, "ps_server %u: the job failed: %s; exiting\n", server_id,
                 DescribeJobFailure(failure).c_str());
    failed.store(true);
    kill(getpid(), SIGTERM);  // the main thread's shutdown path, then exit status 1
  });
  const absl::Status heartbeats =
      (*coordinator)
          ->StartHeartbeats(registration->member_id(),
                            absl::Milliseconds(registration->heartbeat_interval_ms()));
  if (!heartbeats.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", heartbeats.ToString().c_str());
    return 1;
  }
  // Writes are accepted from the member ids the coordinator issued; an id above those this server
  // knows is asked about (once for every request waiting on it).
  server::RegisteredWorkers registered_workers([coordinator_client](auto done) {
    coordinator_client->GetMemberIdsAsync(kMemberIdsTimeout, std::move(done));
  });
  service.SetRegisteredWorkers(&registered_workers);
  service.SetServerId(server_id);
  service.SetStore(store->get());
  metrics_store.store(store->get(), std::memory_order_release);
  auto map_follower =
      std::make_unique<MapFollower>(coordinator->get(), store->get(), server_id, [&failed] {
        failed.store(true);
        kill(getpid(), SIGTERM);  // the main thread's shutdown path, then exit status 1
      });
  follower.store(map_follower.get());
  map_follower->Poke();

  std::fprintf(stderr, "ps_server %d: gRPC security: %s\n", server_id,
               security->security.Describe().c_str());
  std::printf("ps_server %d listening on %s\n", server_id, address.c_str());
  std::fflush(stdout);
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (const absl::Status written = WritePortFile(port_file, port); !written.ok()) {
      std::fprintf(stderr, "ps_server: --port_file: %s\n", std::string(written.message()).c_str());
      return 1;
    }
  }

  const int sig = WaitForShutdownSignal();
  std::fprintf(stderr, "ps_server %d: signal %d, shutting down\n", server_id, sig);
  // Each stage is timed, so that a slow stop says where its time went.
  absl::Time mark = absl::Now();
  std::string stages;
  auto stage_done = [&mark, &stages](const char* name) {
    const absl::Time now = absl::Now();
    absl::StrAppendFormat(&stages, "%s%s %.2f s", stages.empty() ? "" : ", ", name,
                          absl::ToDoubleSeconds(now - mark));
    mark = now;
  };
  const absl::Time stop_start = mark;
  (*store)->Shutdown();  // ends the pulls waiting for a step, so that no call stays open
  stage_done("store");
  metrics_endpoint->reset();  // scrapes read the store
  metrics_store.store(nullptr);
  stage_done("metrics");
  grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  shared_regions.StopCalls();
  stage_done("calls in flight");
  follower.store(nullptr);
  map_follower.reset();
  stage_done("map follower");
  (*coordinator)->StopHeartbeats();
  stage_done("heartbeats");
  grpc_server->Wait();
  stage_done("rpc server");
  std::fprintf(stderr, "ps_server %d: stopped in %.2f s (%s)\n", server_id,
               absl::ToDoubleSeconds(absl::Now() - stop_start), stages.c_str());
  return failed.load() ? 1 : 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  ps::BlockShutdownSignals();
  absl::SetProgramUsageMessage(
      "ps_server --coordinator=HOST:PORT[,HOST:PORT...] [--listen=HOST:PORT] [--advertise=HOST] "
      "[--port_file=PATH] [--metrics_listen=HOST:PORT] [--metrics_port_file=PATH] "
      "[--connect_timeout_s=N] [--hot_keys_sample_every=N] [--lookup_threads=N] "
      "[--shared_memory_mb=N] [--shared_memory_idle_s=N] [--memory_budget_mb=N] "
      "[--tier_dir=PATH --tier_max_disk_gb=N] [--dry_run]");
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}
