// checkpoint_bench: full checkpoints of a real cluster against this machine's disk. For each count
// in --servers and each of --runs runs, a fresh ps_coordinator and ps_servers on loopback hold
// table "emb" (--dim floats, Adagrad, ASYNC, 64 shards), filled by pushing gradients for --rows
// distinct random keys in batches of --batch keys. One JSON line per measurement and run, then one
// per measurement with the median over the runs ("run":"median"; flags are true iff every run's
// were):
//
//  - "disk": the bounds, measured in the same run beside the checkpoints: `dd if=/dev/zero
//    of=DIR/dd.tmp bs=1M count=--dd_mb conv=fdatasync` (write_mb_per_s), then the page cache
//    dropped and the file read back with dd (read_mb_per_s). MB are 1e6 bytes; dd is timed here.
//  - "full_write": the coordinator's StartCheckpoint RPC, timed around the call (seconds); the
//    shard files' bytes; write_mb_per_s; the longest a shard's pushes were held (max_stall_ms);
//    ratio_vs_disk against this run's durable dd write. The servers fsync the files before the
//    manifest is written.
//  - "restore": the cluster terminated and the page cache dropped, the time from starting a new
//    cluster with `ps_coordinator --restore=<the checkpoint>` until a client has pulled keys of
//    every shard (servers answer UNAVAILABLE until their shards are loaded; the client retries
//    for 100 ms, then the pull is started again, so the end is seen within ~100 ms rather than
//    the client's backoff of up to 1 s); restore_mb_per_s and ratio_vs_disk against the dd read.
//    decode_seconds: after the restore, every row of the checkpoint's files walked with RocksDB's
//    reader and nothing else (common/checkpoint_reader.h, two threads, the files in the page
//    cache as the servers found them after the coordinator's check): the floor of reading this
//    format on this machine; ratio_vs_decode is its seconds over the restore's.
//    "exact": those --sample_keys keys (plus one of each shard the sample missed) pulled before the
//    checkpoint and after the restore are equal bit for bit.
//  - "push_during_checkpoint": in the restored cluster, one client pushes batches of --batch
//    existing keys, first for as long as the full write took (at least 1 s: keys_per_s_baseline),
//    then while a second checkpoint is written by a thread of its own (keys_per_s_during: the keys
//    pushed between the RPC's start and its end, a batch straddling the end counted by the share
//    of its time inside), and their ratio.
//  - "incremental": after the full write, gradients pushed to 1% of the rows (every 100th key,
//    distinct), then the next checkpoint (the job has checkpoint_full_every: 2, so it holds only
//    the rows changed since the full one, plus the dense chunks and windows), timed as full_write
//    is: seconds, the files' bytes, changed_rows (rows in its files), ratio_vs_full (its seconds
//    over the full write's); "incremental" says the manifest is incremental on the full one.
//
// Everything goes in a fresh folder under --dir (dd's file, the job, the checkpoints, the daemons'
// logs), removed at the end, except the logs when the bench fails; --dir should be on the disk
// under test. Dropping the page cache needs root: otherwise
// the lines say "page_cache_dropped":false and the reads may come from memory.
//
//   bazel run -c opt //tests/bench:checkpoint_bench -- --servers=1,2
//   bazel run -c opt //tests/bench:checkpoint_bench -- --rows=200000 --runs=1   (smoke test)
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "common/coordinator_client.h"
#include "common/hash.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/testing/daemon.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"

ABSL_FLAG(int64_t, rows, 10000000, "distinct keys pushed into table emb before the checkpoint");
ABSL_FLAG(int, dim, 16, "floats per row");
ABSL_FLAG(std::vector<std::string>, servers, std::vector<std::string>({"1", "2"}),
          "server counts, each run --runs times");
ABSL_FLAG(int, runs, 3, "runs per server count");
ABSL_FLAG(int, batch, 100000, "keys per push, when filling and when measuring pushes");
ABSL_FLAG(int, sample_keys, 10000, "keys pulled to check the restore and to wait for it");
ABSL_FLAG(int, dd_mb, 2048, "MiB dd writes and reads back");
ABSL_FLAG(std::string, dir, "/tmp/checkpoint_bench",
          "a fresh folder is made under it for the run's files and checkpoints");
ABSL_FLAG(int, timeout_s, 1800, "longest wait for a checkpoint, a restore or dd");
ABSL_FLAG(std::string, bin_dir, "", "folder holding server/ and server/coordinator/ binaries");

namespace ps {
namespace {

constexpr char kTable[] = "emb";
constexpr uint32_t kShards = 64;

std::string g_self;  // this binary's path

std::string BinDir() {
  return testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "server/ps_server", "bazel-bin");
}

absl::Duration Timeout() { return absl::Seconds(absl::GetFlag(FLAGS_timeout_s)); }

// One JSON line's measured values, in print order.
struct Line {
  std::string measure;
  std::vector<std::pair<std::string, double>> numbers;
  std::vector<std::pair<std::string, bool>> flags;
};

// The number `key` of `line` (NaN when it has none).
double Value(const Line& line, absl::string_view key) {
  for (const auto& [k, value] : line.numbers) {
    if (k == key) return value;
  }
  return std::nan("");
}

// Integral values (bytes, rows) in full, others as JsonNumber does.
std::string Number(double x) {
  if (x == static_cast<double>(static_cast<int64_t>(x)) && std::abs(x) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(x));
  }
  return testing::JsonNumber(x);
}

void Print(const Line& line, int servers, const std::string& run) {
  std::string out = absl::StrCat("{\"bench\":\"checkpoint\",\"measure\":\"", line.measure,
                                 "\",\"servers\":", servers, ",\"run\":", run);
  for (const auto& [key, value] : line.numbers) {
    absl::StrAppend(&out, ",\"", key, "\":", Number(value));
  }
  for (const auto& [key, value] : line.flags) {
    absl::StrAppend(&out, ",\"", key, "\":", value ? "true" : "false");
  }
  std::printf("%s}\n", out.c_str());
  std::fflush(stdout);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The runs' lines of one measure (the same keys in each): the median of each number, and each flag
// true iff it is in every run.
Line MedianLine(const std::vector<Line>& runs) {
  Line median = runs.front();
  for (size_t i = 0; i < median.numbers.size(); ++i) {
    std::vector<double> values;
    for (const Line& run : runs) values.push_back(run.numbers[i].second);
    median.numbers[i].second = Median(values);
  }
  for (size_t i = 0; i < median.flags.size(); ++i) {
    for (const Line& run : runs) median.flags[i].second &= run.flags[i].second;
  }
  return median;
}

// sync, then `echo 3 > /proc/sys/vm/drop_caches`. False if that cannot be written (not root).
bool DropPageCache() {
  sync();
  std::ofstream out("/proc/sys/vm/drop_caches");
  out << "3\n";
  out.close();
  return static_cast<bool>(out);
}

// Runs dd with `args`, timed from here. Its wall-clock seconds, or its error with its stderr.
absl::StatusOr<double> TimeDd(const std::vector<std::string>& args) {
  const absl::Time start = absl::Now();
  PS_ASSIGN_OR_RETURN(testing::ProcessResult dd, testing::RunProcess("/bin/dd", args, Timeout()));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (dd.exit_code != 0) {
    return absl::InternalError(absl::StrCat("dd exited with ", dd.exit_code, ": ", dd.stderr_text));
  }
  return seconds;
}

// The "disk" line: dd's durable write and its cold read of --dd_mb MiB in `folder`.
absl::StatusOr<Line> MeasureDisk(const std::string& folder) {
  const std::string file = folder + "/dd.tmp";
  const int mb = absl::GetFlag(FLAGS_dd_mb);
  const double bytes = mb * 1048576.0;
  PS_ASSIGN_OR_RETURN(double write_s, TimeDd({"if=/dev/zero", "of=" + file, "bs=1M",
                                              absl::StrCat("count=", mb), "conv=fdatasync"}));
  const bool dropped = DropPageCache();
  PS_ASSIGN_OR_RETURN(double read_s, TimeDd({"if=" + file, "of=/dev/null", "bs=1M"}));
  std::filesystem::remove(file);
  return Line{"disk",
              {{"write_mb_per_s", bytes / 1e6 / write_s}, {"read_mb_per_s", bytes / 1e6 / read_s}},
              {{"page_cache_dropped", dropped}}};
}

// Seconds to walk every row of every file of the checkpoint in `folder` (see "restore"), on two
// threads.
absl::StatusOr<double> TimeDecode(const std::string& folder) {
  PS_ASSIGN_OR_RETURN(rpc::CheckpointManifest manifest, ReadCheckpointManifest(folder));
  std::atomic<int> next{0};
  std::atomic<uint64_t> rows{0};
  absl::Mutex mu;
  absl::Status status;
  const absl::Time start = absl::Now();
  auto walk = [&] {
    for (int i; (i = next.fetch_add(1)) < manifest.shards_size();) {
      absl::StatusOr<std::unique_ptr<ShardFileReader>> reader =
          ShardFileReader::Open(folder + "/" + manifest.shards(i).file());
      absl::StatusOr<uint64_t> n = reader.ok() ? (*reader)->CountRows(kTable) : reader.status();
      if (!n.ok()) {
        absl::MutexLock lock(&mu);
        status = n.status();
        return;
      }
      rows += *n;
    }
  };
  std::thread other(walk);
  walk();
  other.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  PS_RETURN_IF_ERROR(status);
  if (rows != static_cast<uint64_t>(absl::GetFlag(FLAGS_rows))) {
    return absl::InternalError(absl::StrFormat("decode: %d rows in the files, not %d", rows.load(),
                                               absl::GetFlag(FLAGS_rows)));
  }
  return seconds;
}

// Writes the job (checkpoints into `checkpoint_dir`) to "<folder>/job.pbtxt"; returns its path.
absl::StatusOr<std::string> WriteJob(const std::string& folder, int servers,
                                     const std::string& checkpoint_dir) {
  const std::string path = folder + "/job.pbtxt";
  std::ofstream out(path);
  out << absl::StrFormat(
      R"pb(name: "checkpoint_bench"
           tables {
             name: "%s"
             dim: %d
             initializer { kind: UNIFORM low: -0.01 high: 0.01 }
             optimizer { type: "adagrad" learning_rate: 0.01 }
             capacity_hint: %d
           }
           training { mode: ASYNC }
           cluster {
             num_shards: %d
             num_servers: %d
             num_workers: 1
             checkpoint_dir: "%s"
             checkpoint_full_every: 2
           }
      )pb",
      kTable, absl::GetFlag(FLAGS_dim), absl::GetFlag(FLAGS_rows), kShards, servers,
      checkpoint_dir);
  out.close();
  if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  return path;
}

absl::StatusOr<std::unique_ptr<testing::LocalCluster>> StartCluster(
    const std::string& job, int servers, std::vector<std::string> coordinator_args) {
  testing::LocalClusterOptions options;
  options.bin_dir = BinDir();
  options.servers = servers;
  options.coordinator_args = std::move(coordinator_args);
  return testing::LocalCluster::Start(job, options);
}

// A client that waits up to --timeout_s for the shard map, and retries failed calls for
// `retry_timeout`.
absl::StatusOr<std::unique_ptr<Client>> Connect(const testing::LocalCluster& cluster,
                                                absl::Duration retry_timeout = Timeout()) {
  ClientOptions options;
  options.coordinator = cluster.coordinator().address();
  options.connect_timeout = Timeout();
  options.retry_timeout = retry_timeout;
  return Client::Connect(options);
}

absl::StatusOr<rpc::CheckpointResponse> TakeCheckpoint(const testing::LocalCluster& cluster) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> coordinator =
      CoordinatorClient::Connect(cluster.coordinator().address(), absl::Seconds(30));
  if (!coordinator.ok()) return coordinator.status();
  return (*coordinator)->Checkpoint(/*step=*/-1, {}, Timeout());
}

// `rows` distinct random keys (sorted; their shards come from their hashes, not their order).
std::vector<uint64_t> DistinctKeys(int64_t rows) {
  std::mt19937_64 rng(20240601);
  std::vector<uint64_t> keys;
  while (static_cast<int64_t>(keys.size()) < rows) {
    while (static_cast<int64_t>(keys.size()) < rows) keys.push_back(rng());
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }
  return keys;
}

// --sample_keys keys spread over `keys`, plus the first key of each shard they miss.
std::vector<uint64_t> SampleKeys(const std::vector<uint64_t>& keys) {
  const uint64_t name_hash = NameHash(kTable);
  std::vector<bool> covered(kShards, false);
  std::vector<uint64_t> sample;
  const size_t n = std::max(1, absl::GetFlag(FLAGS_sample_keys));
  const size_t stride = std::max<size_t>(1, keys.size() / n);
  for (size_t i = 0; i < keys.size() && sample.size() < n; i += stride) {
    sample.push_back(keys[i]);
    covered[ShardOf(name_hash, keys[i], kShards)] = true;
  }
  for (uint64_t key : keys) {
    const uint32_t shard = ShardOf(name_hash, key, kShards);
    if (!covered[shard]) sample.push_back(key);
    covered[shard] = true;
  }
  return sample;
}

// Gradients for one batch, the same for every batch.
std::vector<float> BatchGradients() {
  std::mt19937_64 rng(7);
  std::vector<float> grads(static_cast<size_t>(absl::GetFlag(FLAGS_batch)) *
                           absl::GetFlag(FLAGS_dim));
  for (float& g : grads) g = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  return grads;
}

// Pushes the batch of `keys` that starts at `*next` (wrapping around); returns how many keys.
absl::StatusOr<size_t> PushBatch(Client* client, const std::vector<uint64_t>& keys,
                                 const std::vector<float>& grads, size_t* next) {
  if (*next >= keys.size()) *next = 0;
  const size_t n = std::min<size_t>(absl::GetFlag(FLAGS_batch), keys.size() - *next);
  const size_t dim = absl::GetFlag(FLAGS_dim);
  PS_RETURN_IF_ERROR(client->Push(kTable, absl::MakeConstSpan(keys.data() + *next, n),
                                  absl::MakeConstSpan(grads.data(), n * dim)));
  *next += n;
  return n;
}

absl::Status Fill(Client* client, const std::vector<uint64_t>& keys,
                  const std::vector<float>& grads) {
  const absl::Time start = absl::Now();
  for (size_t next = 0; next < keys.size();) {
    PS_RETURN_IF_ERROR(PushBatch(client, keys, grads, &next).status());
  }
  std::fprintf(stderr, "checkpoint_bench: filled %zu rows in %.1f s\n", keys.size(),
               absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> PullRows(Client* client, const std::vector<uint64_t>& keys) {
  std::vector<float> rows(keys.size() * absl::GetFlag(FLAGS_dim));
  PS_RETURN_IF_ERROR(client->Pull(kTable, keys, absl::MakeSpan(rows)));
  return rows;
}

// PullRows once every shard is loaded, for up to --timeout_s. The client's own retries back off
// to 1 s between tries; calls of `client` should give up after ~100 ms (its retry_timeout), so
// that the end of loading is seen within about that.
absl::StatusOr<std::vector<float>> PullOnceServed(Client* client,
                                                  const std::vector<uint64_t>& keys) {
  const absl::Time deadline = absl::Now() + Timeout();
  while (true) {
    absl::StatusOr<std::vector<float>> rows = PullRows(client, keys);
    if (rows.ok() || absl::Now() > deadline ||
        !(absl::IsUnavailable(rows.status()) || absl::IsDeadlineExceeded(rows.status()))) {
      return rows;
    }
  }
}

// One push call: its keys and when it ran.
struct PushedBatch {
  size_t keys;
  absl::Time start, end;
};

// Keys pushed within [from, to): a batch straddling an edge counts by the share of its time inside.
double KeysWithin(const std::vector<PushedBatch>& batches, absl::Time from, absl::Time to) {
  double keys = 0;
  for (const PushedBatch& b : batches) {
    const absl::Duration inside = std::min(b.end, to) - std::max(b.start, from);
    if (inside <= absl::ZeroDuration()) continue;
    const absl::Duration took = std::max(b.end - b.start, absl::Nanoseconds(1));
    keys += b.keys * std::min(1.0, absl::FDivDuration(inside, took));
  }
  return keys;
}

// The "push_during_checkpoint" line: pushes for `baseline` without a checkpoint, then while one is
// written from another thread.
absl::StatusOr<Line> MeasurePushDuringCheckpoint(const testing::LocalCluster& cluster,
                                                 Client* client, const std::vector<uint64_t>& keys,
                                                 const std::vector<float>& grads,
                                                 absl::Duration baseline) {
  std::vector<PushedBatch> batches;
  size_t next = 0;
  auto push = [&]() -> absl::Status {
    const absl::Time start = absl::Now();
    PS_ASSIGN_OR_RETURN(size_t n, PushBatch(client, keys, grads, &next));
    batches.push_back({n, start, absl::Now()});
    return absl::OkStatus();
  };
  const absl::Time base_start = absl::Now();
  while (absl::Now() - base_start < baseline) PS_RETURN_IF_ERROR(push());
  const absl::Time base_end = absl::Now();

  std::atomic<bool> written{false};
  absl::StatusOr<rpc::CheckpointResponse> taken;
  absl::Time during_end;
  const absl::Time during_start = absl::Now();
  std::thread checkpoint([&] {
    taken = TakeCheckpoint(cluster);
    during_end = absl::Now();
    written = true;
  });
  absl::Status pushed;
  while (!written && pushed.ok()) pushed = push();
  checkpoint.join();
  PS_RETURN_IF_ERROR(pushed);
  PS_RETURN_IF_ERROR(taken.status());

  const double base_s = absl::ToDoubleSeconds(base_end - base_start);
  const double during_s = absl::ToDoubleSeconds(during_end - during_start);
  const double base_rate = KeysWithin(batches, base_start, base_end) / base_s;
  const double during_rate = KeysWithin(batches, during_start, during_end) / during_s;
  return Line{"push_during_checkpoint",
              {{"rows", keys.size()},
               {"batch", std::min<size_t>(absl::GetFlag(FLAGS_batch), keys.size())},
               {"baseline_s", base_s},
               {"during_s", during_s},
               {"keys_per_s_baseline", base_rate},
               {"keys_per_s_during", during_rate},
               {"push_ratio_during_checkpoint", during_rate / base_rate}},
              {}};
}

// The "incremental" line: pushes to every 100th of `keys` (1% of the rows, distinct), then a
// checkpoint, which builds on `full` (checkpoint_full_every: 2), timed around the call.
absl::StatusOr<Line> MeasureIncremental(const testing::LocalCluster& cluster, Client* client,
                                        const std::vector<uint64_t>& keys,
                                        const std::vector<float>& grads,
                                        const rpc::CheckpointResponse& full, double full_s) {
  std::vector<uint64_t> changed;
  for (size_t i = 0; i < keys.size(); i += 100) changed.push_back(keys[i]);
  for (size_t next = 0; next < changed.size();) {
    PS_RETURN_IF_ERROR(PushBatch(client, changed, grads, &next).status());
  }
  const absl::Time start = absl::Now();
  PS_ASSIGN_OR_RETURN(rpc::CheckpointResponse taken, TakeCheckpoint(cluster));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  PS_ASSIGN_OR_RETURN(rpc::CheckpointManifest manifest, ReadCheckpointManifest(taken.path()));
  uint64_t rows = 0;
  for (const rpc::CheckpointShardFile& file : manifest.shards()) rows += file.rows();
  return Line{"incremental",
              {{"rows", keys.size()},
               {"changed_rows", rows},
               {"pushed_keys", changed.size()},
               {"seconds", seconds},
               {"coordinator_seconds", taken.seconds()},
               {"bytes", taken.bytes()},
               {"ratio_vs_full", seconds / full_s},
               {"bytes_vs_full", static_cast<double>(taken.bytes()) / full.bytes()},
               {"max_stall_ms", taken.max_stall_ms()}},
              {{"incremental", manifest.base_id() == full.id()}}};
}

// One run of every measurement on `servers` servers, in `folder`; adds its lines to `lines` (by
// measure) and prints them.
absl::Status RunOnce(int servers, int run, const std::string& folder,
                     std::map<std::string, std::vector<Line>>* lines) {
  auto report = [&](Line line) {
    Print(line, servers, absl::StrCat(run));
    (*lines)[line.measure].push_back(std::move(line));
  };
  PS_ASSIGN_OR_RETURN(Line disk, MeasureDisk(folder));
  const double disk_write = Value(disk, "write_mb_per_s");
  const double disk_read = Value(disk, "read_mb_per_s");
  report(disk);

  const std::string checkpoint_dir = folder + "/checkpoints";
  PS_ASSIGN_OR_RETURN(std::string job, WriteJob(folder, servers, checkpoint_dir));
  const std::vector<uint64_t> keys = DistinctKeys(absl::GetFlag(FLAGS_rows));
  const std::vector<uint64_t> sample = SampleKeys(keys);
  const std::vector<float> grads = BatchGradients();

  // Fill, keep what the sample's rows hold, checkpoint; then change 1% and checkpoint again.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<testing::LocalCluster> cluster,
                      StartCluster(job, servers, {}));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(*cluster));
  PS_RETURN_IF_ERROR(Fill(client.get(), keys, grads));
  PS_ASSIGN_OR_RETURN(std::vector<float> before, PullRows(client.get(), sample));
  const absl::Time write_start = absl::Now();
  PS_ASSIGN_OR_RETURN(rpc::CheckpointResponse full, TakeCheckpoint(*cluster));
  const double write_s = absl::ToDoubleSeconds(absl::Now() - write_start);
  const double write_mb_per_s = full.bytes() / 1e6 / write_s;
  report(Line{"full_write",
              {{"rows", keys.size()},
               {"dim", absl::GetFlag(FLAGS_dim)},
               {"seconds", write_s},
               {"coordinator_seconds", full.seconds()},
               {"bytes", full.bytes()},
               {"write_mb_per_s", write_mb_per_s},
               {"max_stall_ms", full.max_stall_ms()},
               {"ratio_vs_disk", write_mb_per_s / disk_write}},
              {}});
  PS_ASSIGN_OR_RETURN(Line incremental,
                      MeasureIncremental(*cluster, client.get(), keys, grads, full, write_s));
  report(std::move(incremental));
  client.reset();
  PS_RETURN_IF_ERROR(cluster->Terminate(absl::Seconds(120)));
  cluster.reset();

  // Restore from cold files (the full checkpoint): done when the sample, which covers every shard,
  // has been pulled.
  const bool dropped = DropPageCache();
  const absl::Time restore_start = absl::Now();
  PS_ASSIGN_OR_RETURN(cluster, StartCluster(job, servers, {"--restore=" + full.path()}));
  PS_ASSIGN_OR_RETURN(client, Connect(*cluster, absl::Milliseconds(100)));
  PS_ASSIGN_OR_RETURN(std::vector<float> after, PullOnceServed(client.get(), sample));
  const double restore_s = absl::ToDoubleSeconds(absl::Now() - restore_start);
  // Where the restore's time went, as the daemons say it (their log lines about it).
  std::vector<std::string> logs = {cluster->coordinator().ReadLog()};
  for (const auto& server : cluster->servers()) logs.push_back(server->ReadLog());
  for (const std::string& log : logs) {
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, "restor")) {
        std::fprintf(stderr, "  %s\n", std::string(line).c_str());
      }
    }
  }
  PS_ASSIGN_OR_RETURN(client, Connect(*cluster));  // patient again, for the pushes
  PS_ASSIGN_OR_RETURN(double decode_s, TimeDecode(full.path()));
  const double restore_mb_per_s = full.bytes() / 1e6 / restore_s;
  const bool exact = std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0;
  report(Line{"restore",
              {{"rows", keys.size()},
               {"dim", absl::GetFlag(FLAGS_dim)},
               {"seconds", restore_s},
               {"bytes", full.bytes()},
               {"restore_mb_per_s", restore_mb_per_s},
               {"ratio_vs_disk", restore_mb_per_s / disk_read},
               {"decode_seconds", decode_s},
               {"ratio_vs_decode", decode_s / restore_s},
               {"sampled_keys", sample.size()}},
              {{"exact", exact}, {"page_cache_dropped", dropped}}});

  PS_ASSIGN_OR_RETURN(
      Line push, MeasurePushDuringCheckpoint(*cluster, client.get(), keys, grads,
                                             std::max(absl::Seconds(1), absl::Seconds(write_s))));
  report(std::move(push));
  client.reset();
  PS_RETURN_IF_ERROR(cluster->Terminate(absl::Seconds(120)));
  std::filesystem::remove_all(checkpoint_dir);
  return absl::OkStatus();
}

absl::Status RunAll(const std::string& folder) {
  for (const std::string& flag : absl::GetFlag(FLAGS_servers)) {
    int servers = 0;
    if (!absl::SimpleAtoi(flag, &servers) || servers < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--servers: bad count \"", flag, "\""));
    }
    std::map<std::string, std::vector<Line>> lines;
    for (int run = 0; run < absl::GetFlag(FLAGS_runs); ++run) {
      PS_RETURN_IF_ERROR(RunOnce(servers, run, folder, &lines));
    }
    for (const char* measure :
         {"disk", "full_write", "incremental", "restore", "push_during_checkpoint"}) {
      if (!lines[measure].empty()) Print(MedianLine(lines[measure]), servers, "\"median\"");
    }
  }
  return absl::OkStatus();
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  std::string folder = dir + "/run.XXXXXX";
  if (mkdtemp(folder.data()) == nullptr) {
    std::fprintf(stderr, "checkpoint_bench: cannot create %s\n", folder.c_str());
    return 1;
  }
  // The daemons' logs and dd's captured output go under $TEST_TMPDIR (tests/testing/daemon.h):
  // into the folder too, kept only when the bench fails.
  const std::string logs = folder + "/logs";
  std::filesystem::create_directory(logs, error);
  setenv("TEST_TMPDIR", logs.c_str(), 1);
  const absl::Status status = RunAll(folder);
  if (status.ok()) {
    std::filesystem::remove_all(folder, error);
    std::filesystem::remove(dir, error);  // only if empty: --dir may hold other things
    return 0;
  }
  std::vector<std::filesystem::path> data;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    if (entry.path() != logs) data.push_back(entry.path());
  }
  for (const auto& path : data) std::filesystem::remove_all(path, error);
  std::fprintf(stderr, "checkpoint_bench: %s\n(the daemons' logs are kept in %s)\n",
               status.ToString().c_str(), logs.c_str());
  return 1;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  // What its daemons and workers write goes into one folder, removed at the end.
  auto scratch = ps::testing::UseScopedTempDir("checkpoint_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  return ps::Main();
}
