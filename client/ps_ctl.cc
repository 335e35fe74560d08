// ps_ctl: the command-line tool for operators.
//
//   ps_ctl validate [--check_data=false] JOB_FILE
//                                   check a job file and the data files it names (relative paths
//                                   from the current directory); prints a summary with the steps
//                                   the job will train, or `file:line:col: error`, and warns of a
//                                   job too short to train well (exit 0)
//   ps_ctl status --coordinator=HOST:PORT
//                                   members (workers: training, left, FAILED or SILENT, and steps
//                                   done), shard map (version, shards per server), clocks, the
//                                   step the servers applied (sync), a failed job's reason, and
//                                   every server's figures (asked through the coordinator)
//   ps_ctl shards --coordinator=HOST:PORT
//                                   per shard its primary, replicas, copies catching up, applied
//                                   sequence, rows and bytes; per server its shards, rows, bytes
//   ps_ctl tables --coordinator=HOST:PORT
//                                   per table: dim, optimizer, rows and bytes (each row once, and
//                                   with every copy), keys pulled and pushed
//   ps_ctl hotkeys --coordinator=HOST:PORT --table=NAME [--k=10]
//                                   a table's most pulled and most pushed keys, merged over the
//                                   servers, with estimated counts and their error bounds
//   ps_ctl metrics --coordinator=HOST:PORT [--interval_s=1]
//                                   rates over an interval: keys pulled and pushed per second and
//                                   requests per second per server and in all, rows and bytes
//                                   held, the workers' steps and steps per second
//   ps_ctl checkpoint --coordinator=HOST:PORT [--step=T]   take a checkpoint now
//   Each of these takes --json (one JSON object on stdout) and --timeout_ms (3000: how long to
//   wait for the coordinator; its answer gathers the servers' within 2 s), and, for a cluster
//   that serves TLS, --tls_ca (with --tls_cert and --tls_key where it requires client
//   certificates) and --token_file (ps_ctl presents the file's admin token). --coordinator may list
//   the job's coordinators comma-separated (HOST:PORT,HOST:PORT,...): ps_ctl asks the leader.
//   ps_ctl checkpoint list DIR      the complete checkpoints in a checkpoint_dir, full or on which
//                                   base
//   ps_ctl checkpoint show FOLDER   one checkpoint: its manifest, its chain if incremental, rows
//                                   per table as restored, every file of the chain checked
//   ps_ctl export --checkpoint=FOLDER --table=NAME --out=FILE [--format=tsv|npy]
//                                   a table's embeddings, sorted by id (client/internal/
//                                   checkpoint_export.h gives the formats)
//   ps_ctl convert --job=JOB_FILE --out=FOLDER [--chunk_samples=65536]
//                                   the job's text data into binary files (data.format BINARY,
//                                   worker/data/README.md): FOLDER/train.bin from train_paths,
//                                   FOLDER/eval.bin from eval_paths; one summary line per file,
//                                   the first malformed lines (skipped) on stderr
//
// Exit status: 0 on success, 1 when the command failed (for shards, tables, hotkeys and metrics
// also when a live server did not answer: what the others gave is printed, the missing servers on
// stderr), 2 on a usage error.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/internal/checkpoint_export.h"
#include "client/internal/ctl_format.h"
#include "client/internal/ctl_rpc.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "common/coordinator_client.h"
#include "common/data_check.h"
#include "common/dense_moments.h"
#include "common/grpc/security_flags.h"
#include "common/job_config.h"
#include "worker/data/binary_convert.h"

ABSL_FLAG(std::string, coordinator, "",
          "status, shards, tables, hotkeys, metrics, checkpoint: host:port, or several "
          "comma-separated: the job's coordinators.");
ABSL_FLAG(bool, json, false,
          "status, shards, tables, hotkeys, metrics, checkpoint: print one JSON object instead of "
          "text.");
ABSL_FLAG(uint32_t, k, 10, "hotkeys: how many keys of each direction, 1 to 256.");
ABSL_FLAG(double, interval_s, 1.0, "metrics: seconds between the two samples, > 0.");
ABSL_FLAG(bool, check_data, true,
          "validate: check that the job's data files can be read from the current directory, and "
          "estimate the steps it trains (false: the job file alone, e.g. where the data is not "
          "mounted).");
ABSL_FLAG(int, timeout_ms, 3000,
          "the commands that ask the coordinator: how long to wait for its answer, in ms.");
ABSL_FLAG(int64_t, step, -1,
          "checkpoint: sync jobs' step boundary to cut at (-1: the coordinator picks the next).");
ABSL_FLAG(std::string, checkpoint, "", "export: the checkpoint's folder (<checkpoint_dir>/<id>).");
ABSL_FLAG(std::string, table, "",
          "export: the table whose embeddings to write; hotkeys: the table whose keys to show.");
ABSL_FLAG(std::string, out, "",
          "export: the file to write (replaced once whole); convert: the folder to write into.");
ABSL_FLAG(std::string, job, "", "convert: the job file whose data to convert.");
ABSL_FLAG(int, chunk_samples, 65536, "convert: samples per chunk of the binary files, 1 to 65536.");
ABSL_FLAG(std::string, format, "tsv",
          "export: tsv (id, then the floats, tab-separated) or npy (a NumPy structured array "
          "with fields 'id' <u8 and 'emb' <f4 of shape (dim,)).");

namespace {

constexpr char kUsage[] =
    "usage: ps_ctl validate [--check_data=false] JOB_FILE\n"
    "       ps_ctl status --coordinator=HOST:PORT [--json] [--timeout_ms=3000]\n"
    "       ps_ctl shards --coordinator=HOST:PORT [--json]\n"
    "       ps_ctl tables --coordinator=HOST:PORT [--json]\n"
    "       ps_ctl hotkeys --coordinator=HOST:PORT --table=NAME [--k=10] [--json]\n"
    "       ps_ctl metrics --coordinator=HOST:PORT [--interval_s=1] [--json]\n"
    "       ps_ctl checkpoint --coordinator=HOST:PORT [--step=T] [--json]\n"
    "       (each of these: [--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM]] [--token_file=F])\n"
    "       ps_ctl checkpoint list CHECKPOINT_DIR\n"
    "       ps_ctl checkpoint show CHECKPOINT_FOLDER\n"
    "       ps_ctl export --checkpoint=CHECKPOINT_FOLDER --table=NAME --out=FILE "
    "[--format=tsv|npy]\n"
    "           tsv: one line a row, sorted by id: id<TAB>f1<TAB>...<TAB>f_dim (floats that read\n"
    "                back exactly)\n"
    "           npy: a NumPy array of shape (rows,), dtype [('id', '<u8'), ('emb', '<f4',\n"
    "                (dim,))], sorted by id: a = np.load(FILE); a['id'], a['emb']\n"
    "       ps_ctl convert --job=JOB_FILE --out=FOLDER [--chunk_samples=65536]\n"
    "           the job's train_paths into FOLDER/train.bin, its eval_paths into FOLDER/eval.bin\n"
    "           (binary files for data { format: BINARY })";

int Validate(const std::string& path) {
  const absl::StatusOr<ps::config::Job> job = ps::LoadJobFile(path);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  ps::DataCheckResult data;
  if (absl::GetFlag(FLAGS_check_data)) {
    ps::DataCheckOptions options;
    options.job_path = path;
    options.checker = "ps_ctl";
    data = ps::CheckJobData(*job, options);
    for (const std::string& error : data.errors) std::fprintf(stderr, "%s\n", error.c_str());
    if (!data.ok()) return 1;
  }
  ps::DenseMomentsReport moments;
  if (absl::GetFlag(FLAGS_check_data) && ps::NeedsDenseMoments(*job)) {
    ps::config::Job filled = *job;
    if (const absl::Status s = ps::FillDenseMoments(&filled, {}, &moments); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(s.message()).c_str());
      return 1;
    }
  }
  std::printf("%s: job \"%s\" is valid\n", path.c_str(), job->name().c_str());
  for (const auto& t : job->tables()) {
    std::printf("  table %-16s dim %-5u optimizer %s\n", t.name().c_str(), t.dim(),
                t.optimizer().type().c_str());
  }
  const auto& c = job->cluster();
  std::printf("  cluster: %u servers, %u workers, %u shards, replication %u\n", c.num_servers(),
              c.num_workers(), c.num_shards(), c.replication_factor());
  const char* modes[] = {"sync", "bounded_staleness", "async"};
  std::printf("  training: %s, batch %u\n", modes[job->training().mode()],
              job->training().batch_size());
  for (const std::string& line : moments.lines) {
    std::printf("  %s (computed; the coordinator computes the same)\n", line.c_str());
  }
  if (data.estimate.has_value()) {
    std::printf("  data: %s\n", data.estimate->Describe().c_str());
  } else if (!absl::GetFlag(FLAGS_check_data)) {
    std::printf("  data: not checked (--check_data=false)\n");
  } else if (job->data().train_paths_size() == 0) {
    std::printf("  data: no train_paths (a job for clients only: ps_worker needs them)\n");
  }
  std::fflush(stdout);
  for (const std::string& warning : data.warnings) {
    std::fprintf(stderr, "warning: %s\n", warning.c_str());
  }
  return 0;
}

namespace ctl = ps::client_internal;

// The coordinator named by --coordinator, or nullptr after a usage error on stderr.
std::unique_ptr<ctl::CtlConnection> Connect(const char* command) {
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  if (address.empty()) {
    std::fprintf(stderr, "ps_ctl %s: --coordinator=HOST:PORT is required\n", command);
    return nullptr;
  }
  if (const absl::StatusOr<std::vector<std::string>> parsed =
          ps::ParseCoordinatorAddresses(address);
      !parsed.ok()) {
    std::fprintf(stderr, "ps_ctl %s: --coordinator: %s\n", command,
                 std::string(parsed.status().message()).c_str());
    return nullptr;
  }
  const absl::StatusOr<ps::grpc_util::Security> security =
      ps::grpc_util::SecurityFromFlags(ps::grpc_util::TokenRole::kAdmin);
  if (!security.ok()) {
    std::fprintf(stderr, "ps_ctl %s: %s\n", command, std::string(security.status().message()).c_str());
    return nullptr;
  }
  return std::make_unique<ctl::CtlConnection>(
      address, absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms)), security->ChannelCredentials(),
      security->tls());
}

int Failed(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "ps_ctl %s: %s\n", command, std::string(status.message()).c_str());
  return 1;
}

void Print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// Prints the live servers that did not answer to stderr; 1 if there were any, else 0.
int ReportServerFailures(const char* command, const ps::rpc::ServerStatuses& servers) {
  const std::vector<std::string> failures = ctl::ServerFailures(servers);
  for (const std::string& f : failures) std::fprintf(stderr, "ps_ctl %s: %s\n", command, f.c_str());
  return failures.empty() ? 0 : 1;
}

int Status() {
  const auto connection = Connect("status");
  if (connection == nullptr) return 2;
  const absl::StatusOr<ps::rpc::ClusterStatus> cluster = connection->ClusterStatus();
  if (!cluster.ok()) return Failed("status", cluster.status());
  const absl::StatusOr<ps::rpc::ServerStatuses> servers =
      connection->ServerStatuses(ps::rpc::ServerStatusRequest());
  if (!servers.ok()) {
    // The coordinator's own view still helps; the servers' figures are missing.
    if (!absl::GetFlag(FLAGS_json)) {
      Print(ctl::StatusText(connection->address(), *cluster, ps::rpc::ServerStatuses()));
    }
    return Failed("status", servers.status());
  }
  Print(absl::GetFlag(FLAGS_json)
            ? ctl::StatusJson(connection->address(), *cluster, *servers) + "\n"
            : ctl::StatusText(connection->address(), *cluster, *servers));
  return 0;
}

int Shards() {
  const auto connection = Connect("shards");
  if (connection == nullptr) return 2;
  const absl::StatusOr<ctl::ClusterSample> sample =
      connection->Sample(ps::rpc::ServerStatusRequest());
  if (!sample.ok()) return Failed("shards", sample.status());
  Print(absl::GetFlag(FLAGS_json) ? ctl::ShardsJson(sample->cluster, sample->servers) + "\n"
                                  : ctl::ShardsText(sample->cluster, sample->servers));
  return ReportServerFailures("shards", sample->servers);
}

int Tables() {
  const auto connection = Connect("tables");
  if (connection == nullptr) return 2;
  const absl::StatusOr<ps::rpc::ServerStatuses> servers =
      connection->ServerStatuses(ps::rpc::ServerStatusRequest());
  if (!servers.ok()) return Failed("tables", servers.status());
  Print(absl::GetFlag(FLAGS_json) ? ctl::TablesJson(*servers) + "\n" : ctl::TablesText(*servers));
  return ReportServerFailures("tables", *servers);
}

int HotKeys() {
  const std::string table = absl::GetFlag(FLAGS_table);
  const uint32_t k = absl::GetFlag(FLAGS_k);
  if (table.empty() || k < 1 || k > 256) {
    std::fprintf(stderr, "ps_ctl hotkeys: --table=NAME is required, and --k between 1 and 256\n");
    return 2;
  }
  const auto connection = Connect("hotkeys");
  if (connection == nullptr) return 2;
  ps::rpc::ServerStatusRequest request;
  request.set_hot_keys_table(table);
  request.set_hot_keys_k(ctl::HotKeysToAsk(k));
  const absl::StatusOr<ps::rpc::ServerStatuses> servers = connection->ServerStatuses(request);
  if (!servers.ok()) return Failed("hotkeys", servers.status());
  const ctl::MergedHotKeys hot = ctl::MergeHotKeys(*servers, table, request.hot_keys_k(), k);
  Print(absl::GetFlag(FLAGS_json) ? ctl::HotKeysJson(hot, *servers) + "\n" : ctl::HotKeysText(hot));
  return ReportServerFailures("hotkeys", *servers);
}

int Metrics() {
  const double interval = absl::GetFlag(FLAGS_interval_s);
  if (!(interval > 0 && interval <= 3600)) {
    std::fprintf(stderr, "ps_ctl metrics: --interval_s must be > 0 and at most 3600\n");
    return 2;
  }
  const auto connection = Connect("metrics");
  if (connection == nullptr) return 2;
  const absl::StatusOr<ctl::ClusterSample> before =
      connection->Sample(ps::rpc::ServerStatusRequest());
  if (!before.ok()) return Failed("metrics", before.status());
  // The interval itself: the rates are taken over the time between the two answers.
  absl::SleepFor(absl::Seconds(interval));
  const absl::StatusOr<ctl::ClusterSample> after =
      connection->Sample(ps::rpc::ServerStatusRequest());
  if (!after.ok()) return Failed("metrics", after.status());
  const ctl::ClusterRates rates = ctl::ComputeRates(*before, *after);
  Print(absl::GetFlag(FLAGS_json) ? ctl::MetricsJson(rates, after->servers) + "\n"
                                  : ctl::MetricsText(rates));
  return ReportServerFailures("metrics", after->servers);
}

int Checkpoint() {
  const auto connection = Connect("checkpoint");
  if (connection == nullptr) return 2;
  const absl::StatusOr<ps::rpc::CheckpointResponse> response =
      connection->Checkpoint(absl::GetFlag(FLAGS_step));
  if (!response.ok()) return Failed("checkpoint", response.status());
  Print(absl::GetFlag(FLAGS_json) ? ctl::ToJson(*response) + "\n" : ctl::CheckpointText(*response));
  return 0;
}

int ListCheckpoints(const std::string& dir) {
  std::vector<std::string> partial;
  absl::StatusOr<std::vector<ps::rpc::CheckpointManifest>> all = ps::ListCheckpoints(dir, &partial);
  if (!all.ok()) {
    std::fprintf(stderr, "ps_ctl checkpoint list: %s\n", all.status().ToString().c_str());
    return 1;
  }
  // rows and MB: what the checkpoint's files hold (an incremental one: the rows changed since
  // its base).
  std::printf("%-20s %-8s %-8s %-12s %-12s %-22s %s\n", "id", "mode", "step", "rows", "MB", "kind",
              "tables");
  for (const ps::rpc::CheckpointManifest& m : *all) {
    uint64_t rows = 0, bytes = 0;
    for (const auto& f : m.shards()) {
      rows += f.rows();
      bytes += f.bytes();
    }
    std::string tables;
    for (const auto& t : m.tables()) {
      absl::StrAppend(&tables, tables.empty() ? "" : ", ", t.name(), " (dim ", t.dim(), ")");
    }
    const std::string kind =
        m.base_id() == 0 ? std::string("full") : absl::StrCat("incremental on ", m.base_id());
    std::printf("%-20llu %-8s %-8lld %-12llu %-12.1f %-22s %s\n",
                static_cast<unsigned long long>(m.id()), m.mode().c_str(),
                static_cast<long long>(m.step()), static_cast<unsigned long long>(rows),
                bytes / 1e6, kind.c_str(), tables.c_str());
  }
  for (const std::string& p : partial)
    std::printf("partial (no manifest, ignored): %s\n", p.c_str());
  return 0;
}

int ShowCheckpoint(const std::string& folder) {
  const absl::StatusOr<ps::rpc::CheckpointManifest> m = ps::ReadCheckpointManifest(folder);
  if (!m.ok()) {
    std::fprintf(stderr, "ps_ctl checkpoint show: %s\n", m.status().ToString().c_str());
    return 1;
  }
  // An incremental checkpoint is restored with its chain: its bases down to a full checkpoint.
  const absl::StatusOr<std::vector<ps::CheckpointLink>> chain = ps::ReadCheckpointChain(folder, *m);
  // Every file of the chain checked against its manifest (size, XXH3-64); this checkpoint's files'
  // rows counted by table against their headers.
  std::vector<std::string> base_damage;
  if (chain.ok()) {
    for (size_t i = 1; i < chain->size(); ++i) {
      for (const ps::rpc::CheckpointShardFile& file : (*chain)[i].manifest.shards()) {
        const absl::Status checked =
            ps::VerifyShardFile(absl::StrCat((*chain)[i].folder, "/", file.file()), file);
        if (!checked.ok()) base_damage.push_back(checked.ToString());
      }
    }
  }
  std::vector<uint64_t> table_rows(m->tables_size());
  std::vector<std::string> damage(m->shards_size());
  uint64_t bytes = 0;
  for (int i = 0; i < m->shards_size(); ++i) {
    const ps::rpc::CheckpointShardFile& file = m->shards(i);
    bytes += file.bytes();
    const std::string path = absl::StrCat(folder, "/", file.file());
    absl::Status checked = ps::VerifyShardFile(path, file);
    absl::StatusOr<std::unique_ptr<ps::ShardFileReader>> reader = ps::ShardFileReader::Open(path);
    if (checked.ok() && !reader.ok()) checked = reader.status();
    uint64_t rows = 0;
    std::vector<uint64_t> counts(m->tables_size());
    for (int t = 0; checked.ok() && t < m->tables_size(); ++t) {
      const absl::StatusOr<uint64_t> n = (*reader)->CountRows(m->tables(t).name());
      if (!n.ok()) checked = n.status();
      counts[t] = n.value_or(0);
      rows += counts[t];
    }
    if (checked.ok() && rows != file.rows()) {
      checked = absl::DataLossError(
          absl::StrFormat("%s holds %d rows, the manifest says %d", path, rows, file.rows()));
    }
    if (!checked.ok()) {
      damage[i] = checked.ToString();
      continue;
    }
    if (!file.incremental()) {
      for (int t = 0; t < m->tables_size(); ++t) table_rows[t] += counts[t];
      continue;
    }
    // The shard's rows as restored: its chain's files merged, each id once.
    if (!chain.ok() || !base_damage.empty()) continue;
    const absl::StatusOr<std::vector<ps::ShardFileRef>> files =
        ps::ShardFileChain(*chain, file.shard());
    if (!files.ok()) {
      damage[i] = files.status().ToString();
      continue;
    }
    std::vector<std::string> paths;
    for (const ps::ShardFileRef& ref : *files) paths.push_back(ref.path);
    for (int t = 0; t < m->tables_size(); ++t) {
      absl::StatusOr<std::unique_ptr<ps::ShardChainCursor>> cursor =
          ps::ShardChainCursor::Open(paths, m->tables(t).name());
      if (!cursor.ok()) {
        damage[i] = cursor.status().ToString();
        break;
      }
      for (; (*cursor)->Valid(); (*cursor)->Next()) ++table_rows[t];
      if (!(*cursor)->status().ok()) {
        damage[i] = (*cursor)->status().ToString();
        break;
      }
    }
  }

  std::printf("checkpoint %llu of job \"%s\" in %s\n", static_cast<unsigned long long>(m->id()),
              m->job_name().c_str(), folder.c_str());
  if (m->step() >= 0) {
    std::printf("  mode %s, step %lld (every shard holds exactly the steps before it)\n",
                m->mode().c_str(), static_cast<long long>(m->step()));
  } else {
    std::printf("  mode %s, step -1 (each shard cut at its own applied sequence)\n",
                m->mode().c_str());
  }
  std::printf("  created %s, took %.2f s\n",
              absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC",
                               absl::FromUnixMillis(m->created_unix_ms()), absl::UTCTimeZone())
                  .c_str(),
              m->seconds());
  std::printf("  %d shards, %llu bytes (%.1f MB)\n", m->shards_size(),
              static_cast<unsigned long long>(bytes), bytes / 1e6);
  if (m->base_id() == 0) {
    std::printf("  full: every shard file holds all of its shard's rows\n");
  } else if (chain.ok()) {
    std::vector<std::string> ids;
    for (const ps::CheckpointLink& link : *chain) ids.push_back(absl::StrCat(link.manifest.id()));
    std::printf("  incremental on checkpoint %llu; restored with its chain %s (full)\n",
                static_cast<unsigned long long>(m->base_id()), absl::StrJoin(ids, " <- ").c_str());
  } else {
    std::printf("  incremental on checkpoint %llu; CHAIN BROKEN: %s\n",
                static_cast<unsigned long long>(m->base_id()), chain.status().ToString().c_str());
  }
  for (const std::string& d : base_damage) std::printf("  base file DAMAGED: %s\n", d.c_str());
  std::printf("tables (rows as restored):\n  %-20s %-6s %-10s %s\n", "name", "dim", "optimizer",
              "rows");
  for (int t = 0; t < m->tables_size(); ++t) {
    const ps::config::Table& table = m->tables(t);
    std::printf("  %-20s %-6u %-10s %llu\n", table.name().c_str(), table.dim(),
                table.optimizer().type().c_str(), static_cast<unsigned long long>(table_rows[t]));
  }
  std::printf("shards:\n  %-6s %-20s %-12s %-10s %-6s %-12s %-12s %s\n", "shard", "file", "bytes",
              "rows", "dense", "sequence", "applied step", "kind");
  int damaged = 0;
  for (int i = 0; i < m->shards_size(); ++i) {
    const ps::rpc::CheckpointShardFile& f = m->shards(i);
    const std::string kind =
        f.incremental() ? absl::StrCat("on ", f.base_id()) : std::string("full");
    std::printf("  %-6u %-20s %-12llu %-10llu %-6llu %-12llu %-12lld %s\n", f.shard(),
                f.file().c_str(), static_cast<unsigned long long>(f.bytes()),
                static_cast<unsigned long long>(f.rows()),
                static_cast<unsigned long long>(f.dense_chunks()),
                static_cast<unsigned long long>(f.sequence()),
                static_cast<long long>(f.applied_step()), kind.c_str());
    if (!damage[i].empty()) {
      std::printf("         DAMAGED: %s\n", damage[i].c_str());
      ++damaged;
    }
  }
  int status = 0;
  if (damaged > 0) {
    std::fprintf(stderr,
                 "ps_ctl checkpoint show: %d of %d shard files are damaged; their rows are not "
                 "counted in the tables' rows\n",
                 damaged, m->shards_size());
    status = 1;
  }
  if (!chain.ok() || !base_damage.empty()) {
    std::fprintf(stderr,
                 "ps_ctl checkpoint show: the checkpoint's chain is broken (%s); its incremental "
                 "shards' rows are not counted and it cannot be restored\n",
                 chain.ok() ? absl::StrCat(base_damage.size(), " damaged base files").c_str()
                            : chain.status().ToString().c_str());
    status = 1;
  }
  return status;
}

int Export() {
  const std::string folder = absl::GetFlag(FLAGS_checkpoint);
  const std::string table = absl::GetFlag(FLAGS_table);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (folder.empty() || table.empty() || out.empty()) {
    std::fprintf(stderr, "ps_ctl export: --checkpoint, --table and --out are required\n%s\n",
                 kUsage);
    return 2;
  }
  const absl::StatusOr<ps::client_internal::ExportFormat> format =
      ps::client_internal::ParseExportFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) {
    std::fprintf(stderr, "ps_ctl export: %s\n", std::string(format.status().message()).c_str());
    return 2;
  }
  const absl::StatusOr<ps::client_internal::ExportSummary> summary =
      ps::client_internal::ExportTable(folder, table, *format, out);
  if (!summary.ok()) {
    std::fprintf(stderr, "ps_ctl export: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  std::printf("exported %llu rows of table \"%s\" (dim %u) to %s (%s)\n",
              static_cast<unsigned long long>(summary->rows), table.c_str(), summary->dim,
              out.c_str(), absl::GetFlag(FLAGS_format).c_str());
  return 0;
}

int Convert() {
  const std::string job_path = absl::GetFlag(FLAGS_job);
  ps::worker::ConvertOptions options;
  options.out_dir = absl::GetFlag(FLAGS_out);
  options.chunk_samples = absl::GetFlag(FLAGS_chunk_samples);
  if (job_path.empty() || options.out_dir.empty()) {
    std::fprintf(stderr, "ps_ctl convert: --job and --out are required\n%s\n", kUsage);
    return 2;
  }
  if (options.chunk_samples < 1 ||
      options.chunk_samples > ps::worker::BinaryFormat::kMaxChunkSamples) {
    std::fprintf(stderr, "ps_ctl convert: --chunk_samples must be in [1, %d]\n",
                 ps::worker::BinaryFormat::kMaxChunkSamples);
    return 2;
  }
  absl::StatusOr<ps::config::Job> job = ps::LoadJobFile(job_path);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  // The binary files hold transformed values: STANDARDIZE's computed moments are applied here.
  ps::DenseMomentsReport moments;
  if (const absl::Status s = ps::FillDenseMoments(&*job, {}, &moments); !s.ok()) {
    std::fprintf(stderr, "ps_ctl convert: %s: %s\n", job_path.c_str(),
                 std::string(s.message()).c_str());
    return 1;
  }
  for (const std::string& line : moments.lines) std::printf("%s (computed)\n", line.c_str());
  const absl::StatusOr<ps::worker::ConvertSummary> summary =
      ps::worker::ConvertJobData(*job, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "ps_ctl convert: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  const auto print = [](const char* what, const ps::worker::ConvertedFile& f) {
    for (const std::string& report : f.skip_reports) {
      std::fprintf(stderr, "warning: skipped %s\n", report.c_str());
    }
    std::printf(
        "converted %s: %lld samples, %lld skipped lines, from %lld files (%lld bytes) to %s "
        "(%lld bytes, %lld chunks)\n",
        what, static_cast<long long>(f.samples), static_cast<long long>(f.skipped_lines),
        static_cast<long long>(f.input_files), static_cast<long long>(f.input_bytes),
        f.path.c_str(), static_cast<long long>(f.bytes), static_cast<long long>(f.chunks));
  };
  print("train", summary->train);
  if (summary->eval.has_value()) print("eval", *summary->eval);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() >= 2 ? args[1] : "";
  if (args.size() == 2) {
    if (command == "status") return Status();
    if (command == "shards") return Shards();
    if (command == "tables") return Tables();
    if (command == "hotkeys") return HotKeys();
    if (command == "metrics") return Metrics();
    if (command == "checkpoint") return Checkpoint();
  }
  // The commands that read files print text only.
  if (absl::GetFlag(FLAGS_json)) {
    std::fprintf(stderr,
                 "ps_ctl: --json is for status, shards, tables, hotkeys, metrics and "
                 "checkpoint\n%s\n",
                 kUsage);
    return 2;
  }
  if (args.size() == 3 && command == "validate") return Validate(args[2]);
  if (args.size() == 4 && command == "checkpoint" && std::string(args[2]) == "list") {
    return ListCheckpoints(args[3]);
  }
  if (args.size() == 4 && command == "checkpoint" && std::string(args[2]) == "show") {
    return ShowCheckpoint(args[3]);
  }
  if (args.size() == 2 && command == "export") return Export();
  if (args.size() == 2 && command == "convert") return Convert();
  std::fprintf(stderr, "%s\n", kUsage);
  return 2;
}
