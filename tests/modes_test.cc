// The consistency modes (worker/README.md) checked end to end on a real cluster: a
// ps_coordinator and two ps_server processes, and three workers as threads of this test, each with
// its own Client (role WORKER) and CoordinatorClient and a worker::StepSync for the job's mode,
// running the trainer's step protocol: BeforePull(t); SetClock(t); Pull; Push; AfterPush(t), or,
// in the cases that prefetch, the pipelined one (BeforePull(t + 1) and the pull of t + 1 before
// step t pushes; the push of t waited for, and AfterPush(t), when step t + 1 pushes).
//
// The table is SGD with learning rate 1 and zero-initialised rows, and every push pushes gradient
// -1 to a shared probe key and to the key of its step, so a pulled row counts the pushes applied to
// it (exactly, in float): the shared key counts all of them, a step's key those of that step. One
// worker is a straggler made so by the test, not by a sleep: before it pushes step t it waits (on a
// condition, with a deadline) until the other two have ended as many steps as its mode lets them
// get ahead (StragglerHold), so what is checked below holds however loaded the machine is. All
// three sleep seeded random delays below 2 ms, which only vary the interleaving. What every
// pull saw is checked against what its mode promises, and progress in steps, never in time.
//
// A worker with a row cache (training.row_cache) serves the probe keys from a worker::RowCache
// while fresh and pulls the rest, as the trainer does: what it saw must still keep the mode's
// promise (StepSync tightens BOUNDED_STALENESS's wait by refresh_steps), and the cache must have
// served some of it.
//
// Then the modes that apply pushes on arrival train for real: ps_worker processes in ASYNC and
// BOUNDED_STALENESS mode reach the synthetic teacher's held-out AUC within 0.03.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "common/hash.h"
#include "proto/job.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"
// From //worker:trainer's dependencies (//worker:step_sync itself is private to worker/).
#include "worker/row_cache.h"
#include "worker/step_sync.h"

namespace ps {
namespace {

constexpr int kWorkers = 3;
constexpr int kStraggler = 2;  // its rank
constexpr int64_t kSteps = 30;
// The bound of everyone's random delays, and how long the straggler waits for the others to get
// ahead before it reports that its mode held them back.
constexpr int kMaxJitterMicros = 1000;  // twice per step
constexpr absl::Duration kHoldDeadline = absl::Seconds(60);
constexpr char kTable[] = "probe";
// Every push adds 1 to kTotalKey and to StepKey(its step).
constexpr uint64_t kTotalKey = 7;
uint64_t StepKey(int64_t step) { return 1000 + static_cast<uint64_t>(step); }
// The largest staleness tested; async must let the fast workers get further ahead than it does.
constexpr int kMaxStaleness = 4;

struct ModeCase {
  const char* name;
  config::Training::Mode mode;
  int staleness;
  float quorum;
  uint32_t timeout_ms;
  // Replication 2 (SYNC), pulls spread over both copies (cluster.read_from_replicas).
  bool read_from_replicas = false;
  // The workers overlap steps as the trainer's pipeline does where the mode allows it
  // (worker/step_pipeline.h, kPrefetch: ASYNC, BOUNDED_STALENESS with staleness >= 2): the pull
  // of step t + 1 starts before step t computes, and the push of t is waited for (and the step
  // ended) only when t + 1 pushes.
  bool prefetch = false;
  // training.row_cache's refresh_steps (0: no row cache).
  int refresh_steps = 0;
};

// The staleness of the servers' rows: staleness less the row cache's refresh_steps.
int PullStaleness(const ModeCase& c) { return c.staleness - c.refresh_steps; }

std::string Describe(const ModeCase& c) {
  return absl::StrFormat(
      "%s (staleness %d, sync_quorum %g, sync_timeout_ms %d%s%s%s)", c.name, c.staleness, c.quorum,
      c.timeout_ms, c.read_from_replicas ? ", reads from replicas" : "",
      c.prefetch ? ", prefetching" : "",
      c.refresh_steps > 0 ? absl::StrCat(", row cache refreshed every ", c.refresh_steps) : "");
}

std::string WriteProbeJob(const ModeCase& c, int id) {
  const std::string path = absl::StrCat(testing::TempDir(), "/modes_", id, ".pbtxt");
  std::ofstream job(path);
  job << absl::StrFormat(
      R"pb(name: "modes_%d"
           tables {
             name: "%s"
             dim: 1
             initializer { kind: ZEROS }
             optimizer { type: "sgd" learning_rate: 1 }
           }
           training { mode: %s staleness: %d sync_quorum: %f sync_timeout_ms: %d %s }
           cluster { num_shards: 16 num_servers: 2 num_workers: %d %s }
      )pb",
      id, kTable, config::Training::Mode_Name(c.mode), c.staleness, c.quorum, c.timeout_ms,
      c.refresh_steps > 0
          ? absl::StrCat("row_cache { max_rows: 100 refresh_steps: ", c.refresh_steps, " }")
          : "",
      kWorkers, c.read_from_replicas ? "replication_factor: 2 read_from_replicas: true" : "");
  return path;
}

// How far ahead of the straggler's step t the others must have ended steps before it pushes t:
// as far as the mode lets them (so the run shows the mode's bound reached, never passed), and in
// SYNC with a quorum two steps past t, which the cluster then applied without the straggler (its
// push of t comes late, and it skips a step).
int64_t StragglerHold(const ModeCase& c) {
  switch (c.mode) {
    case config::Training::SYNC:
      return c.quorum < 1.0f ? 3 : 1;  // ended t + 2; ended t (the straggler ends every step last)
    case config::Training::BOUNDED_STALENESS:
      // Ended t + s: the pull of t + s + 1 waits for the straggler's t (s: PullStaleness).
      // Prefetching, the straggler holding its push of t has ended only t - 2 (it ends t - 1
      // when it pushes t), and the others start the pull of u + 1 before they push u and end
      // u - 1: the pull of t + s - 1 is the furthest they start, so they end t + s - 3 and go on
      // with t + s - 2.
      return c.prefetch ? PullStaleness(c) - 2 : PullStaleness(c) + 1;
    default:
      return kMaxStaleness + 2;  // further than any staleness tested lets a worker go
  }
}

// How many steps each worker has completed (pushed, before it reports the step) and ended (the
// step it goes on with, after AfterPush), and the largest difference in completed steps between
// the most and the least advanced seen at any moment.
class Progress {
 public:
  void Completed(int worker, int64_t steps) {
    absl::MutexLock lock(&mu_);
    done_[worker] = steps;
    const auto [lo, hi] = std::minmax_element(std::begin(done_), std::end(done_));
    max_lead_ = std::max(max_lead_, *hi - *lo);
  }
  void Ended(int worker, int64_t next_step) {
    absl::MutexLock lock(&mu_);
    ended_[worker] = next_step;
  }
  // Waits until every worker but `worker` has ended `steps` steps (continues at `steps` or later,
  // or is done); false if that did not happen by `deadline`.
  bool AwaitOthersEnded(int worker, int64_t steps, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    const auto others_ended = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (int w = 0; w < kWorkers; ++w) {
        if (w != worker && ended_[w] < steps) return false;
      }
      return true;
    };
    return mu_.AwaitWithDeadline(absl::Condition(&others_ended), deadline);
  }
  int64_t max_lead() {
    absl::MutexLock lock(&mu_);
    return max_lead_;
  }

 private:
  absl::Mutex mu_;
  int64_t done_[kWorkers] ABSL_GUARDED_BY(mu_) = {};
  int64_t ended_[kWorkers] ABSL_GUARDED_BY(mu_) = {};
  int64_t max_lead_ ABSL_GUARDED_BY(mu_) = 0;
};

// What one pull saw.
struct Observation {
  int64_t step = 0;             // the step the pull was for
  float total = 0;              // the shared probe key
  std::vector<float> per_step;  // StepKey(0 .. kSteps - 1)
  std::vector<int> started;     // pushes of each step issued by then (by anyone)
};

struct WorkerRun {
  absl::Status status;
  std::vector<Observation> pulls;
  int64_t iterations = 0;     // steps computed and pushed
  int64_t aborted_pulls = 0;  // sync: pulls for a step the cluster applied without this worker
  // The straggler: the first step before which the others did not get StragglerHold ahead within
  // kHoldDeadline (its mode held them back), or -1.
  int64_t held_back_at = -1;
  // With a row cache: what it did.
  worker::RowCacheStats cache;
};

// The keys every step pulls: the shared key and every step's key.
std::vector<uint64_t> ProbeKeys() {
  std::vector<uint64_t> keys = {kTotalKey};
  for (int64_t t = 0; t < kSteps; ++t) keys.push_back(StepKey(t));
  return keys;
}

// What a pull of step `step` saw (`values`: the probe keys' rows), with the pushes of each step
// issued by then.
Observation Observe(int64_t step, const std::vector<float>& values,
                    const std::vector<std::atomic<int>>& started) {
  Observation seen;
  seen.step = step;
  seen.total = values[0];
  seen.per_step.assign(values.begin() + 1, values.end());
  for (int64_t t = 0; t < kSteps; ++t) seen.started.push_back(started[t].load());
  return seen;
}

// The straggler, before it pushes `step`: waits until the others ended step + hold (as far as
// its mode lets them get ahead); if they do not by kHoldDeadline, records the step and goes on.
void HoldIfStraggler(int rank, int64_t step, int64_t hold, Progress* progress, WorkerRun* out) {
  if (rank == kStraggler &&
      !progress->AwaitOthersEnded(rank, std::min(step + hold, kSteps),
                                  absl::Now() + kHoldDeadline) &&
      out->held_back_at < 0) {
    out->held_back_at = step;
  }
}

// A probe worker's connections: its Client (role WORKER), its CoordinatorClient and a StepSync
// for the job's mode over them.
struct ProbeWorker {
  std::unique_ptr<Client> client;
  std::unique_ptr<CoordinatorClient> coordinator;
  std::unique_ptr<worker::StepSync> sync;
};

absl::StatusOr<ProbeWorker> ConnectProbe(const std::string& coordinator_address, int rank) {
  ClientOptions options;
  options.coordinator = coordinator_address;
  options.connect_timeout = absl::Seconds(30);
  options.role = rpc::WORKER;
  options.rank = rank;
  ProbeWorker probe;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return client.status();
  probe.client = *std::move(client);
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> coordinator =
      CoordinatorClient::Connect(coordinator_address, absl::Seconds(30));
  if (!coordinator.ok()) return coordinator.status();
  probe.coordinator = *std::move(coordinator);
  probe.sync = std::make_unique<worker::StepSync>(
      probe.client->job(), probe.client.get(), probe.coordinator.get(), probe.client->worker_id(),
      /*wait_timeout=*/absl::Seconds(60));
  return probe;
}

// One worker: the trainer's protocol around a pull of the probe keys and a push to two of them.
void RunWorker(const std::string& coordinator_address, int rank, uint32_t seed, int64_t hold,
               std::vector<std::atomic<int>>* started, Progress* progress, WorkerRun* out) {
  absl::StatusOr<ProbeWorker> probe = ConnectProbe(coordinator_address, rank);
  if (!probe.ok()) {
    out->status = probe.status();
    return;
  }
  Client* const client = probe->client.get();
  worker::StepSync& sync = *probe->sync;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> jitter(0, kMaxJitterMicros);
  const std::vector<uint64_t> keys = ProbeKeys();
  std::vector<float> values(keys.size());
  const std::vector<float> grads = {-1.0f, -1.0f};
  // With a row cache: the probe keys' rows come from it while fresh, the misses are pulled.
  std::unique_ptr<worker::RowCache> cache;
  if (client->job().training().has_row_cache()) {
    absl::StatusOr<std::unique_ptr<worker::RowCache>> made = worker::RowCache::Create(
        worker::RowCache::OptionsOf(client->job().training().row_cache(), {1}));
    if (!made.ok()) {
      out->status = made.status();
      return;
    }
    cache = std::move(*made);
  }
  std::vector<uint32_t> misses;
  std::vector<uint64_t> miss_keys;
  std::vector<float> miss_values;
  const auto pull = [&](int64_t step) {
    if (cache == nullptr) return client->Pull(kTable, keys, absl::MakeSpan(values));
    cache->Lookup(0, step, keys, values.data(), &misses);
    miss_keys.clear();
    for (uint32_t i : misses) miss_keys.push_back(keys[i]);
    miss_values.resize(miss_keys.size());
    if (miss_keys.empty()) return absl::OkStatus();
    const absl::Status pulled = client->Pull(kTable, miss_keys, absl::MakeSpan(miss_values));
    if (!pulled.ok()) return pulled;
    for (size_t m = 0; m < misses.size(); ++m) values[misses[m]] = miss_values[m];
    cache->Admit(0, step, miss_keys, miss_values.data());
    return absl::OkStatus();
  };

  int64_t step = 0;
  while (step < kSteps) {
    absl::SleepFor(absl::Microseconds(jitter(rng)));
    absl::Status status = sync.BeforePull(step);
    if (!status.ok()) {
      out->status = status;
      return;
    }
    client->SetClock(step);
    status = pull(step);
    if (status.code() == absl::StatusCode::kAborted && sync.mode() == config::Training::SYNC) {
      // The cluster applied this step without us: end it and go on where the cluster is, as the
      // trainer does.
      ++out->aborted_pulls;
      absl::StatusOr<int64_t> next = sync.AfterPush(step);
      if (!next.ok()) {
        out->status = next.status();
        return;
      }
      step = *next;
      progress->Ended(rank, step);
      continue;
    }
    if (!status.ok()) {
      out->status = status;
      return;
    }
    out->pulls.push_back(Observe(step, values, *started));

    // "Compute": the straggler holds its push until the others are as far ahead as its mode
    // lets them be (if they never get there, it says so and goes on, so that no one hangs), and
    // everyone's jitter.
    HoldIfStraggler(rank, step, hold, progress, out);
    absl::SleepFor(absl::Microseconds(jitter(rng)));

    (*started)[step].fetch_add(1);
    const std::vector<uint64_t> push_keys = {kTotalKey, StepKey(step)};
    status = client->Push(kTable, push_keys, grads);
    if (!status.ok()) {
      out->status = status;
      return;
    }
    ++out->iterations;
    progress->Completed(rank, out->iterations);
    absl::StatusOr<int64_t> next = sync.AfterPush(step);
    if (!next.ok()) {
      out->status = next.status();
      return;
    }
    step = *next;
    progress->Ended(rank, step);
  }
  if (cache != nullptr) out->cache = cache->stats();
}

// One worker, prefetching: the trainer's pipelined protocol (worker/step_pipeline.h, kPrefetch)
// around the same pulls and pushes as RunWorker's.
void RunPrefetchingWorker(const std::string& coordinator_address, int rank, uint32_t seed,
                          int64_t hold, std::vector<std::atomic<int>>* started, Progress* progress,
                          WorkerRun* out) {
  absl::StatusOr<ProbeWorker> probe = ConnectProbe(coordinator_address, rank);
  if (!probe.ok()) {
    out->status = probe.status();
    return;
  }
  Client* const client = probe->client.get();
  worker::StepSync& sync = *probe->sync;
  if (!sync.can_prefetch()) {
    out->status = absl::InvalidArgumentError("the mode does not let a worker prefetch");
    return;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> jitter(0, kMaxJitterMicros);
  const std::vector<uint64_t> keys = ProbeKeys();
  std::vector<float> values[2] = {std::vector<float>(keys.size()), std::vector<float>(keys.size())};
  const std::vector<float> grads = {-1.0f, -1.0f};
  std::vector<uint64_t> push_keys;
  std::future<absl::Status> pulls[2];
  std::future<absl::Status> push;
  int64_t pushed_step = -1;  // the push in flight, or -1
  // Starts the pull of `step` into slot `slot`, after the mode's wait.
  const auto start_pull = [&](int64_t step, int slot) {
    absl::Status status = sync.BeforePull(step);
    if (!status.ok()) return status;
    client->SetClock(step);
    pulls[slot] = client->PullAsync(kTable, keys, absl::MakeSpan(values[slot]));
    return absl::OkStatus();
  };
  // Waits for the push in flight and ends its step.
  const auto finish_push = [&]() -> absl::Status {
    if (pushed_step < 0) return absl::OkStatus();
    absl::Status status = push.get();
    if (!status.ok()) return status;
    ++out->iterations;
    progress->Completed(rank, out->iterations);
    absl::StatusOr<int64_t> next = sync.AfterPush(pushed_step);
    if (!next.ok()) return next.status();
    progress->Ended(rank, *next);
    pushed_step = -1;
    return absl::OkStatus();
  };

  absl::Status status = start_pull(0, 0);
  for (int64_t step = 0; status.ok() && step < kSteps; ++step) {
    const int slot = static_cast<int>(step % 2);
    absl::SleepFor(absl::Microseconds(jitter(rng)));
    status = pulls[slot].get();
    if (!status.ok()) break;
    out->pulls.push_back(Observe(step, values[slot], *started));
    // The next step's pull, while this one "computes".
    if (step + 1 < kSteps) {
      status = start_pull(step + 1, 1 - slot);
      if (!status.ok()) break;
    }
    HoldIfStraggler(rank, step, hold, progress, out);
    absl::SleepFor(absl::Microseconds(jitter(rng)));
    // The push: the previous one is waited for and its step ended first.
    status = finish_push();
    if (!status.ok()) break;
    (*started)[step].fetch_add(1);
    push_keys = {kTotalKey, StepKey(step)};
    client->SetClock(step);
    push = client->PushAsync(kTable, push_keys, grads);
    pushed_step = step;
  }
  if (status.ok()) status = finish_push();
  out->status = status;
}

// The servers' own account (ps_ctl status shows the same).
absl::StatusOr<rpc::ServerStatus> ServerStatus(const std::string& address) {
  auto stub = rpc::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  rpc::ServerStatus status;
  const grpc::Status rpc = stub->GetStatus(&context, rpc::ServerStatusRequest(), &status);
  if (!rpc.ok()) return absl::UnavailableError(rpc.error_message());
  return status;
}

// Counts the observations that break `rule` (which returns an empty string when one holds) and
// keeps the first complaint.
struct Violations {
  int count = 0;
  std::string first;
  void Check(int worker, const Observation& o, const std::string& complaint) {
    if (complaint.empty()) return;
    if (count++ == 0) first = absl::StrCat("worker ", worker, " at step ", o.step, ": ", complaint);
  }
};

TEST_CASE("every mode's pulls see what the mode promises, with a straggler",
          "[integration][modes]") {
  // sync_quorum 0.66 of 3 workers is 2 (the servers round q * workers to the nearest whole
  // number); the timeout case uses 0.9 (3 of 3, but below 1 so the timeout applies): the straggler
  // ends no step before the others ended the next two, so only the timeout applies them.
  const ModeCase c = GENERATE(values<ModeCase>({
      {"SYNC", config::Training::SYNC, 0, 1.0f, 10000},
      {"SYNC quorum", config::Training::SYNC, 0, 0.66f, 10000},
      {"SYNC quorum timeout", config::Training::SYNC, 0, 0.9f, 5},
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, 0, 1.0f, 10000},
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, 1, 1.0f, 10000},
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, kMaxStaleness, 1.0f, 10000},
      {"ASYNC", config::Training::ASYNC, 0, 1.0f, 10000},
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, 1, 1.0f, 10000, true},
      {"ASYNC", config::Training::ASYNC, 0, 1.0f, 10000, true},
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, 2, 1.0f, 10000, false, true},
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, kMaxStaleness, 1.0f, 10000, false,
       true},
      {"ASYNC", config::Training::ASYNC, 0, 1.0f, 10000, false, true},
      // Rows up to 2 steps old from the cache, up to 2 more from the servers.
      {"BOUNDED_STALENESS", config::Training::BOUNDED_STALENESS, kMaxStaleness, 1.0f, 10000, false,
       false, 2},
      {"ASYNC", config::Training::ASYNC, 0, 1.0f, 10000, false, false, 3},
  }));
  static int next_id = 0;
  const int id = next_id++;
  INFO(Describe(c));
  const bool sync = c.mode == config::Training::SYNC;
  const bool quorum = sync && c.quorum < 1.0f;

  const std::string job_path = WriteProbeJob(c, id);
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string address = (*cluster)->coordinator().address();
  ClientOptions options;
  options.coordinator = address;
  auto observer = Client::Connect(options);
  REQUIRE(observer.ok());
  {
    // In sync mode a pull of step t waits for step t - 1 on the servers it reaches, and EndStep
    // goes to every server: the probe keys must reach both, as a real batch's keys do.
    const rpc::ShardMap map = (*observer)->shard_map();
    std::set<uint32_t> reached;
    for (uint64_t key : ProbeKeys()) {
      reached.insert(map.shards(ShardOf(NameHash(kTable), key, map.num_shards())).primary());
    }
    REQUIRE(reached.size() == 2);
  }

  std::vector<std::atomic<int>> started(kSteps);
  Progress progress;
  std::vector<WorkerRun> runs(kWorkers);
  {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kWorkers; ++rank) {
      threads.emplace_back(c.prefetch ? RunPrefetchingWorker : RunWorker, address, rank,
                           static_cast<uint32_t>(100 * id + rank), StragglerHold(c), &started,
                           &progress, &runs[rank]);
    }
    for (std::thread& t : threads) t.join();
  }
  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w << ": " << runs[w].status.ToString());
    REQUIRE(runs[w].status.ok());
  }

  // What each pull saw, against the mode's promise.
  Violations violations;
  for (int w = 0; w < kWorkers; ++w) {
    for (const Observation& o : runs[w].pulls) {
      const int64_t t = o.step;
      for (int64_t u = 0; u < kSteps; ++u) {
        const float got = o.per_step[u];
        std::string complaint;
        if (got > o.started[u]) {
          complaint = absl::StrCat("step ", u, " counts ", got, " pushes, only ", o.started[u],
                                   " were issued");
        } else if (sync && u >= t && got != 0) {
          complaint = absl::StrCat("sees ", got, " pushes of step ", u);
        } else if (sync && !quorum && u < t && got != kWorkers) {
          complaint = absl::StrCat("sees ", got, " pushes of step ", u, ", not ", kWorkers);
        } else if (quorum && u < t && got < 1) {
          complaint = absl::StrCat("step ", u, " was applied with no push");
        } else if (c.mode == config::Training::BOUNDED_STALENESS && u < t - c.staleness &&
                   got != kWorkers) {
          complaint = absl::StrCat("misses a push of step ", u);
        } else if (c.mode == config::Training::BOUNDED_STALENESS && u > t + c.staleness &&
                   got != 0) {
          complaint = absl::StrCat("sees a push of step ", u, ", more than the staleness ahead");
        }
        violations.Check(w, o, complaint);
      }
      // The shared key, as worker/README.md states the modes.
      if (sync && !quorum) {
        violations.Check(
            w, o,
            o.total == kWorkers * t ? "" : absl::StrCat("total ", o.total, ", not ", kWorkers * t));
      } else if (sync) {
        violations.Check(w, o,
                         o.total <= kWorkers * t
                             ? ""
                             : absl::StrCat("total ", o.total, " above ", kWorkers * t));
      } else if (c.mode == config::Training::BOUNDED_STALENESS) {
        violations.Check(
            w, o,
            o.total >= kWorkers * (t - c.staleness)
                ? ""
                : absl::StrCat("total ", o.total, " below ", kWorkers * (t - c.staleness)));
      }
    }
  }
  INFO("first violation: " << violations.first);
  CHECK(violations.count == 0);
  if (c.read_from_replicas) {
    // The replicas did answer some of those pulls.
    uint64_t replica_pulls = 0;
    for (const auto& server : (*cluster)->servers()) {
      auto stub = rpc::ParameterServer::NewStub(
          grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
      grpc::ClientContext context;
      rpc::ServerStatus status;
      REQUIRE(stub->GetStatus(&context, rpc::ServerStatusRequest(), &status).ok());
      replica_pulls += status.replica_pulls();
    }
    CHECK(replica_pulls > 0);
  }

  // Progress, in steps.
  const int64_t max_lead = progress.max_lead();
  int64_t fast_iterations = kSteps;
  for (int w = 0; w < kWorkers; ++w) {
    if (w != kStraggler) fast_iterations = std::min(fast_iterations, runs[w].iterations);
  }
  const int64_t straggler_iterations = runs[kStraggler].iterations;
  std::printf(
      "%s: max lead %lld steps; iterations: fast >= %lld, straggler %lld (%lld aborted pulls)\n",
      Describe(c).c_str(), static_cast<long long>(max_lead),
      static_cast<long long>(fast_iterations), static_cast<long long>(straggler_iterations),
      static_cast<long long>(runs[kStraggler].aborted_pulls));
  INFO("max lead " << max_lead << ", fast iterations " << fast_iterations
                   << ", straggler iterations " << straggler_iterations);
  // The others got as far ahead as the straggler waited for: the mode held no one back early.
  INFO("the others did not get " << StragglerHold(c) << " steps ahead of the straggler's step "
                                 << runs[kStraggler].held_back_at << " within "
                                 << absl::FormatDuration(kHoldDeadline));
  CHECK(runs[kStraggler].held_back_at == -1);
  if (!quorum) {
    for (int w = 0; w < kWorkers; ++w) CHECK(runs[w].iterations == kSteps);
  }
  // The straggler holds each step until the others are as far ahead as the mode allows, so the
  // lead reaches the mode's bound, and a lead past it is the mode's failure.
  if (sync && !quorum) CHECK(max_lead == 1);
  if (quorum) {
    // Each step the straggler computed was applied without it, two steps on: it skipped steps.
    // With the 0.66 quorum the two others are the quorum and never do (with the 5 ms timeout one
    // of them may, on a loaded machine, so only the straggler is checked there).
    CHECK(straggler_iterations < kSteps);
    if (c.timeout_ms > 1000) CHECK(fast_iterations == kSteps);
  }
  if (c.mode == config::Training::BOUNDED_STALENESS && !c.prefetch) {
    CHECK(max_lead == PullStaleness(c) + 1);
  }
  if (c.mode == config::Training::BOUNDED_STALENESS && c.prefetch) {
    // The straggler holds its push of t until the others go on with t + s - 2 (above): they have
    // completed s - 1 steps more than its t - 1 then; never more than the bound lets them.
    CHECK(max_lead >= c.staleness - 1);
    CHECK(max_lead <= c.staleness + 1);
  }
  if (c.refresh_steps > 0) {
    // The cache served part of every worker's probe keys.
    for (int w = 0; w < kWorkers; ++w) {
      INFO("worker " << w << ": " << runs[w].cache.hits << " hits of " << runs[w].cache.lookups);
      CHECK(runs[w].cache.hits > 0);
      CHECK(runs[w].cache.hits < runs[w].cache.lookups);
    }
  }
  if (c.mode == config::Training::ASYNC) CHECK(max_lead > kMaxStaleness + 1);

  // In the end, every push was applied once, or (sync with a quorum) dropped and counted.
  uint64_t late_pushes = 0, late_keys = 0;
  for (const auto& server : (*cluster)->servers()) {
    absl::StatusOr<rpc::ServerStatus> status = ServerStatus(server->address());
    REQUIRE(status.ok());
    late_pushes += status->late_pushes_dropped();
    late_keys += status->late_keys_dropped();
  }
  const std::vector<uint64_t> keys = ProbeKeys();
  std::vector<float> final_values(keys.size());
  REQUIRE((*observer)->Pull(kTable, keys, absl::MakeSpan(final_values)).ok());
  int64_t issued = 0;
  double applied_keys = 0;
  for (float v : final_values) applied_keys += v;
  for (int64_t u = 0; u < kSteps; ++u) {
    issued += started[u].load();
    if (!quorum) CHECK(final_values[1 + u] == kWorkers);
  }
  std::printf("  late pushes dropped %llu (%llu keys); %lld pushes issued\n",
              static_cast<unsigned long long>(late_pushes),
              static_cast<unsigned long long>(late_keys), static_cast<long long>(issued));
  CHECK(applied_keys + late_keys == 2 * issued);
  if (quorum) {
    // At least the straggler's first push (of step 0, applied before it pushed) came late.
    CHECK(late_pushes > 0);
  } else {
    CHECK(late_pushes == 0);
  }

  observer->reset();
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

// The synthetic data of training_integration_test, written once per test process.
struct TeacherData {
  std::string train;
  std::string heldout;
  double teacher_auc = 0;
};

const TeacherData& Data() {
  static const TeacherData* const data = [] {
    auto* d = new TeacherData;
    worker::SyntheticOptions options;
    options.cardinalities = {200};
    options.seed = 5;
    auto synthetic = worker::SyntheticData::Create(options);
    REQUIRE(synthetic.ok());
    d->train = absl::StrCat(testing::TempDir(), "/modes_train.tsv");
    d->heldout = absl::StrCat(testing::TempDir(), "/modes_heldout.tsv");
    REQUIRE(worker::WriteSyntheticFile(**synthetic, worker::SyntheticData::kTrainStream, 250000,
                                       d->train, false)
                .ok());
    auto teacher = worker::WriteSyntheticFile(**synthetic, worker::SyntheticData::kHeldoutStream,
                                              40000, d->heldout, /*exact_auc=*/true);
    REQUIRE(teacher.ok());
    d->teacher_auc = teacher->teacher_auc;
    return d;
  }();
  return *data;
}

// Why 0.03: on this data (training_integration_test's) sync training comes within 0.013 of the
// teacher's held-out AUC (0.801 against 0.814), and so did async and staleness 4 here (0.800 in
// every run we made). Pushes applied out of step make the runs nondeterministic, and staleness
// could cost a little accuracy on a loaded machine; 0.03 leaves that room, about twice the gap we
// measured. It catches a mode that breaks training, not one that loses a few pushes (the model
// hardly notices those): the probe test above counts pushes exactly.
//
// Worker 1 is a straggler at a third of its speed, and balance_batches (on by default) must give
// it the smaller part of every step: the batches are compared, not the times.
TEST_CASE(
    "async and bounded-staleness training with a straggler reach the teacher's held-out AUC "
    "within 0.03, the straggler taking smaller batches",
    "[integration][modes][training]") {
  // The two dense paths balance at different points: after every step's AllReduce
  // (dense_sync_every 1), or after the averaging of local SGD (8). ASYNC again with a row cache
  // (training.row_cache, refresh_steps 4) of half the table (26 fields of 200 values).
  const auto [mode, staleness, dense_sync_every, refresh_steps] =
      GENERATE(values<std::tuple<const char*, int, int, int>>({
          {"ASYNC", 0, 1, 0},
          {"BOUNDED_STALENESS", 4, 8, 0},
          {"ASYNC", 0, 1, 4},
      }));
  INFO(mode << " staleness " << staleness << " dense_sync_every " << dense_sync_every
            << " row cache refresh_steps " << refresh_steps);
  const TeacherData& data = Data();
  const std::string job_path =
      absl::StrCat(testing::TempDir(), "/modes_training_", mode, "_", refresh_steps, ".pbtxt");
  {
    std::ofstream job(job_path);
    job << absl::StrFormat(
        R"pb(name: "modes_training"
             tables {
               name: "emb"
               dim: 8
               initializer { kind: ZEROS }
               optimizer { type: "adagrad" learning_rate: 0.1 initial_accumulator: 0.01 }
             }
             model {
               bottom_mlp: [ 32, 8 ]
               top_mlp: [ 32 ]
               shared_table: "emb"
             }
             data { train_paths: "%s" eval_paths: "%s" }
             training {
               mode: %s
               staleness: %d
               dense_sync_every: %d
               batch_size: 256
               epochs: 2
               dense_optimizer { type: "adam" learning_rate: 0.002 }
               seed: 3 %s
             }
             cluster { num_shards: 16 num_servers: 2 num_workers: 2 }
        )pb",
        data.train, data.heldout, mode, staleness, dense_sync_every,
        refresh_steps > 0
            ? absl::StrCat("row_cache { max_rows: 2600 refresh_steps: ", refresh_steps, " }")
            : "");
  }
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  auto workers = (*cluster)->RunWorkers(
      {{"--progress_s=60", "--backend=cpu"}, {"--progress_s=60", "--backend=cpu", "--slowdown=3"}},
      absl::Minutes(5));
  INFO(workers.status().ToString());
  REQUIRE(workers.ok());
  const std::string result_line = testing::ResultJson((*workers)[0].stdout_text);
  const std::string straggler_line = testing::ResultJson((*workers)[1].stdout_text);
  INFO("worker 1: " << straggler_line);
  CHECK(testing::JsonField(straggler_line, "mean_batch") < 256);
  CHECK(testing::JsonField(result_line, "mean_batch") > 256);
  std::printf("%s staleness %d, worker 0: %s\nteacher AUC %.6f\n", mode, staleness,
              result_line.c_str(), data.teacher_auc);
  INFO("worker 0: " << result_line << "\nteacher AUC " << data.teacher_auc);
  const double auc = testing::JsonField(result_line, "heldout_auc");
  CHECK(testing::JsonField(result_line, "heldout_samples") == 40000);
  // The step breakdown adds up to the mean step (issue 38), pipelined (ASYNC) or not, the
  // straggler's too.
  CHECK(testing::CheckStepBreakdown(result_line).ToString() == "OK");
  CHECK(testing::CheckStepBreakdown(straggler_line).ToString() == "OK");
  CHECK(auc > data.teacher_auc - 0.03);
  CHECK(auc <= data.teacher_auc + 0.01);  // a learner cannot beat the truth by much
  if (refresh_steps > 0) {
    // The cache served part of the rows; RESULT's row_cache object is null without one.
    for (const std::string& line : {result_line, straggler_line}) {
      const double hit_rate = testing::JsonField(line, "hit_rate");
      CHECK(hit_rate > 0);
      CHECK(hit_rate < 1);
    }
  } else {
    CHECK(absl::StrContains(result_line, "\"row_cache\":null"));
  }
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace ps
