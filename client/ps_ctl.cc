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
//                                   step the servers applied (sync), and a failed job's reason
//   ps_ctl checkpoint --coordinator=HOST:PORT [--step=T]   take a checkpoint now
//   ps_ctl checkpoint list DIR      the complete checkpoints in a checkpoint_dir, full or on which
//                                   base
//   ps_ctl checkpoint show FOLDER   one checkpoint: its manifest, its chain if incremental, rows
//                                   per table as restored, every file of the chain checked
//   ps_ctl export --checkpoint=FOLDER --table=NAME --out=FILE [--format=tsv|npy]
//                                   a table's embeddings, sorted by id (client/internal/
//                                   checkpoint_export.h gives the formats)
//
// Exit status: 0 on success, 1 when the command failed, 2 on a usage error.
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
#include "absl/time/time.h"
#include "client/internal/checkpoint_export.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "common/coordinator_client.h"
#include "common/data_check.h"
#include "common/job_config.h"
#include "proto/ps.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "", "status: the coordinator's host:port.");
ABSL_FLAG(bool, check_data, true,
          "validate: check that the job's data files can be read from the current directory, and "
          "estimate the steps it trains (false: the job file alone, e.g. where the data is not "
          "mounted).");
ABSL_FLAG(int, timeout_ms, 5000, "status: how long to try to reach the coordinator, in ms.");
ABSL_FLAG(int64_t, step, -1,
          "checkpoint: sync jobs' step boundary to cut at (-1: the coordinator picks the next).");
ABSL_FLAG(std::string, checkpoint, "", "export: the checkpoint's folder (<checkpoint_dir>/<id>).");
ABSL_FLAG(std::string, table, "", "export: the table whose embeddings to write.");
ABSL_FLAG(std::string, out, "", "export: the file to write (replaced once whole).");
ABSL_FLAG(std::string, format, "tsv",
          "export: tsv (id, then the floats, tab-separated) or npy (a NumPy structured array "
          "with fields 'id' <u8 and 'emb' <f4 of shape (dim,)).");

namespace {

constexpr char kUsage[] =
    "usage: ps_ctl validate [--check_data=false] JOB_FILE\n"
    "       ps_ctl status --coordinator=HOST:PORT [--timeout_ms=N]\n"
    "       ps_ctl checkpoint --coordinator=HOST:PORT [--step=T]\n"
    "       ps_ctl checkpoint list CHECKPOINT_DIR\n"
    "       ps_ctl checkpoint show CHECKPOINT_FOLDER\n"
    "       ps_ctl export --checkpoint=CHECKPOINT_FOLDER --table=NAME --out=FILE "
    "[--format=tsv|npy]\n"
    "           tsv: one line a row, sorted by id: id<TAB>f1<TAB>...<TAB>f_dim (floats that read\n"
    "                back exactly)\n"
    "           npy: a NumPy array of shape (rows,), dtype [('id', '<u8'), ('emb', '<f4',\n"
    "                (dim,))], sorted by id: a = np.load(FILE); a['id'], a['emb']";

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

const char* RoleName(ps::rpc::Role role) {
  switch (role) {
    case ps::rpc::SERVER:
      return "server";
    case ps::rpc::WORKER:
      return "worker";
    case ps::rpc::CLIENT:
      return "client";
    default:
      return "?";
  }
}

const char* WorkerState(const ps::rpc::MemberStatus& m) {
  if (m.failed()) return "FAILED";
  if (m.left()) return "left";
  return m.alive() ? "training" : "SILENT";
}

// "clocks: steps done: slowest worker N, fastest M; workers: 2 of 2 registered: 1 training,
// 1 left". Steps done are the clocks + 1; the slowest is unknown until every rank registered.
std::string ClocksLine(const ps::rpc::ClusterStatus& status) {
  int registered = 0;
  int training = 0, left = 0, failed = 0, silent = 0;
  for (const auto& m : status.members()) {
    if (m.role() != ps::rpc::WORKER) continue;
    ++registered;
    const std::string state = WorkerState(m);
    training += state == "training";
    left += state == "left";
    failed += state == "FAILED";
    silent += state == "SILENT";
  }
  const ps::rpc::ClockState& clocks = status.clocks();
  if (registered == 0) {
    return absl::StrFormat("clocks: no worker has registered yet (the job expects %u)",
                           status.num_workers());
  }
  std::string line = static_cast<uint32_t>(registered) >= status.num_workers()
                         ? absl::StrFormat("clocks: steps done: slowest worker %d, fastest %d",
                                           clocks.min_clock() + 1, clocks.max_clock() + 1)
                         : absl::StrFormat("clocks: steps done: fastest worker %d, slowest unknown",
                                           clocks.max_clock() + 1);
  absl::StrAppendFormat(&line, "; workers: %d of %u registered", registered, status.num_workers());
  std::vector<std::string> states;
  if (training > 0) states.push_back(absl::StrCat(training, " training"));
  if (left > 0) states.push_back(absl::StrCat(left, " left (done)"));
  if (failed > 0) states.push_back(absl::StrCat(failed, " FAILED"));
  if (silent > 0) states.push_back(absl::StrCat(silent, " SILENT"));
  absl::StrAppend(&line, ": ", absl::StrJoin(states, ", "));
  return line;
}

int Status(const std::string& address) {
  if (address.empty()) {
    std::fprintf(stderr, "ps_ctl status: --coordinator=HOST:PORT is required\n");
    return 2;
  }
  const absl::Duration timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  absl::StatusOr<std::unique_ptr<ps::CoordinatorClient>> client =
      ps::CoordinatorClient::Connect(address, timeout);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_ctl status: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const absl::StatusOr<ps::rpc::ClusterStatus> status = (*client)->GetStatus();
  if (!status.ok()) {
    std::fprintf(stderr, "ps_ctl status: %s\n", status.status().ToString().c_str());
    return 1;
  }

  std::printf("job \"%s\", coordinator %s\n", status->job_name().c_str(), address.c_str());
  if (status->has_failure()) {
    std::printf("JOB FAILED: %s\n", ps::DescribeJobFailure(status->failure()).c_str());
  }
  std::printf("members: %d\n", status->members_size());
  // A worker's state: training, left (done), FAILED (it reported an error) or SILENT (its
  // heartbeats stopped without its leaving); its steps done (clock + 1).
  std::printf("  %-6s %-7s %-5s %-24s %-6s %-9s %-7s %s\n", "id", "role", "rank", "address",
              "alive", "state", "steps", "last seen");
  for (const auto& m : status->members()) {
    const bool worker = m.role() == ps::rpc::WORKER;
    std::printf("  %-6u %-7s %-5d %-24s %-6s %-9s %-7s %llu ms ago\n", m.member_id(),
                RoleName(m.role()), m.rank(), m.address().empty() ? "-" : m.address().c_str(),
                m.alive() ? "yes" : "NO", worker ? WorkerState(m) : "-",
                worker ? absl::StrCat(m.clock() + 1).c_str() : "-",
                static_cast<unsigned long long>(m.last_seen_ms()));
  }

  const ps::rpc::ShardMap& map = status->shard_map();
  if (map.version() == 0) {
    std::printf("shard map: not ready (fewer servers registered than the job expects)\n");
  } else {
    std::printf("shard map: version %llu, %u shards\n",
                static_cast<unsigned long long>(map.version()), map.num_shards());
    std::vector<int> primaries(map.servers_size());
    std::vector<int> replicas(map.servers_size());
    for (const auto& shard : map.shards()) {
      if (shard.primary() < primaries.size()) ++primaries[shard.primary()];
      for (const uint32_t r : shard.replicas()) {
        if (r < replicas.size()) ++replicas[r];
      }
    }
    std::vector<int> catching_up(map.servers_size());
    int lost = 0;
    for (const auto& shard : map.shards()) {
      lost += shard.lost() ? 1 : 0;
      for (const uint32_t r : shard.catching_up()) {
        if (r < catching_up.size()) ++catching_up[r];
      }
    }
    for (const auto& server : map.servers()) {
      const uint32_t id = server.server_id();
      std::printf("  server %-3u %-24s %-5s primary %d, replica %d shards", id,
                  server.address().c_str(), server.alive() ? "alive" : "DEAD",
                  id < primaries.size() ? primaries[id] : 0,
                  id < replicas.size() ? replicas[id] : 0);
      if (id < catching_up.size() && catching_up[id] > 0) {
        std::printf(", catching up %d", catching_up[id]);
      }
      std::printf("\n");
    }
    std::printf("failovers: %llu, lost shards: %d\n",
                static_cast<unsigned long long>(status->failovers()), lost);
    // Every shard's copies: server:sequence, a replica's lag as its primary sees it.
    std::printf("  %-6s %-22s %s\n", "shard", "primary (sequence)", "replicas (sequence, lag)");
    for (const auto& shard : status->shards()) {
      if (shard.lost()) {
        std::printf("  %-6u LOST: no copy left (DATA_LOSS until a checkpoint restores it)\n",
                    shard.shard());
        continue;
      }
      std::string primary;
      std::string others;
      for (const auto& copy : shard.copies()) {
        if (copy.primary()) {
          primary = absl::StrFormat("%u (%llu)", copy.server_id(),
                                    static_cast<unsigned long long>(copy.applied_sequence()));
          continue;
        }
        absl::StrAppendFormat(&others, "%s%u (%llu, %llu records / %llu bytes / %llu ms behind)%s",
                              others.empty() ? "" : ", ", copy.server_id(),
                              static_cast<unsigned long long>(copy.applied_sequence()),
                              static_cast<unsigned long long>(copy.lag().records()),
                              static_cast<unsigned long long>(copy.lag().bytes()),
                              static_cast<unsigned long long>(copy.lag().millis()),
                              copy.catching_up() ? " catching up" : "");
      }
      std::printf("  %-6u %-22s %s\n", shard.shard(), primary.c_str(),
                  others.empty() ? "-" : others.c_str());
    }
  }
  std::printf("%s\n", ClocksLine(*status).c_str());
  if (status->has_applied_step()) {
    std::printf(
        "applied step: %s (servers: the last step every shard applied)\n",
        status->applied_step() < 0 ? "none yet" : absl::StrCat(status->applied_step()).c_str());
  }
  for (const auto& server : map.servers()) {
    if (!server.alive()) continue;
    auto stub = ps::rpc::ParameterServer::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    ps::rpc::ServerStatus s;
    const grpc::Status rpc = stub->GetStatus(&context, ps::rpc::ServerStatusRequest(), &s);
    if (!rpc.ok()) {
      std::printf("server %u: %s\n", server.server_id(), rpc.error_message().c_str());
      continue;
    }
    std::printf(
        "server %u: %d primary shards, applied step %lld, late pushes dropped %llu (%llu "
        "keys), pull staleness mean %.2f max %lld steps\n",
        s.server_id(), s.primary_shards_size(), static_cast<long long>(s.applied_step()),
        static_cast<unsigned long long>(s.late_pushes_dropped()),
        static_cast<unsigned long long>(s.late_keys_dropped()), s.mean_pull_staleness(),
        static_cast<long long>(s.max_pull_staleness()));
    for (const auto& t : s.tables()) {
      std::printf("  table %-16s dim %-5u rows %-12llu bytes %llu\n", t.name().c_str(), t.dim(),
                  static_cast<unsigned long long>(t.rows()),
                  static_cast<unsigned long long>(t.bytes()));
    }
  }
  return 0;
}

int Checkpoint(const std::string& address) {
  if (address.empty()) {
    std::fprintf(stderr, "ps_ctl checkpoint: --coordinator=HOST:PORT is required\n");
    return 2;
  }
  auto stub = ps::rpc::Coordinator::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ps::rpc::CheckpointRequest request;
  request.set_step(absl::GetFlag(FLAGS_step));
  ps::rpc::CheckpointResponse response;
  const grpc::Status rpc = stub->StartCheckpoint(&context, request, &response);
  if (!rpc.ok()) {
    std::fprintf(stderr, "ps_ctl checkpoint: %s\n", rpc.error_message().c_str());
    return 1;
  }
  std::printf(
      "checkpoint %llu at %s: step %lld, %.1f MB in %.2f s, longest stall of a shard's "
      "pushes %.1f ms\n",
      static_cast<unsigned long long>(response.id()), response.path().c_str(),
      static_cast<long long>(response.step()), response.bytes() / 1e6, response.seconds(),
      response.max_stall_ms());
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() == 3 && std::string(args[1]) == "validate") return Validate(args[2]);
  if (args.size() == 2 && std::string(args[1]) == "status") {
    return Status(absl::GetFlag(FLAGS_coordinator));
  }
  if (args.size() == 2 && std::string(args[1]) == "checkpoint") {
    return Checkpoint(absl::GetFlag(FLAGS_coordinator));
  }
  if (args.size() == 4 && std::string(args[1]) == "checkpoint" && std::string(args[2]) == "list") {
    return ListCheckpoints(args[3]);
  }
  if (args.size() == 4 && std::string(args[1]) == "checkpoint" && std::string(args[2]) == "show") {
    return ShowCheckpoint(args[3]);
  }
  if (args.size() == 2 && std::string(args[1]) == "export") return Export();
  std::fprintf(stderr, "%s\n", kUsage);
  return 2;
}
