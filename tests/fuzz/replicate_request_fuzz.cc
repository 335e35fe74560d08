// libFuzzer target: a copy's side of replication. The bytes after the first are a Replicate
// call's request (a ReplicateRequest), cut into slices whose size the first byte picks, as gRPC
// may deliver them; ApplyReplicateRequest (server/replication/replicator.h) reads them in place
// and applies their records to the shards of a small two-table job: shard 0 a complete copy,
// shard 1 a copy waiting for a snapshot, any other shard held nowhere. Bad input must give an
// error status or a refused record, never a crash. Bit 7 of the first byte picks sync mode.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/optimizer.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/replication/replicator.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"

namespace {

// The job's tables: "emb" dim 4 with Adagrad (rows of 8 floats), "wide" dim 1 with SGD.
struct Job {
  Job() {
    AddTable("emb", 4, "adagrad");
    AddTable("wide", 1, "sgd");
    ps::config::Optimizer dense;
    dense.set_type("adam");
    dense.set_learning_rate(0.01f);
    auto optimizer = ps::Optimizer::Create(dense);
    if (!optimizer.ok()) std::abort();  // a broken fixture, not a finding
    dense_optimizer = std::move(optimizer).value();
    for (const bool sync : {false, true}) {
      ps::server::ShardConfig& c = config[sync];
      c.tables = &tables;
      c.dense_optimizer = dense_optimizer.get();
      c.dense_chunk_floats = 16;
      c.sync = sync;
    }
  }
  void AddTable(const char* name, uint32_t dim, const char* optimizer) {
    ps::config::Table table;
    table.set_name(name);
    table.set_dim(dim);
    table.mutable_optimizer()->set_type(optimizer);
    table.mutable_optimizer()->set_learning_rate(0.1f);
    table.mutable_initializer()->set_kind(ps::config::Initializer::UNIFORM);
    auto spec = ps::server::TableSpec::Create(table, 5);
    if (!spec.ok()) std::abort();
    tables.push_back(std::move(spec).value());
  }
  std::vector<std::unique_ptr<ps::server::TableSpec>> tables;
  std::unique_ptr<ps::Optimizer> dense_optimizer;
  ps::server::ShardConfig config[2];
};

}  // namespace

// Protobuf logs every string field of invalid UTF-8 it parses: silenced, it would be most of the
// run's time and output.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const Job* const job = new Job;
  const uint8_t control = data[0];
  const bool sync = (control & 0x80) != 0;
  // Slices of 1 to 128 bytes, or the whole request in one.
  const size_t piece = (control & 0x7F) == 0 ? size : (control & 0x7F);
  std::vector<grpc::Slice> slices;
  for (size_t at = 1; at < size; at += piece) {
    slices.emplace_back(data + at, std::min(piece, size - at));
  }
  const grpc::ByteBuffer request(slices.data(), slices.size());
  // A fresh pair of copies per input, so that a crash replays from its input alone.
  ps::server::Shard complete(0, job->config[sync], {});
  ps::server::Shard waiting(1, job->config[sync], {}, /*complete=*/false);
  ps::rpc::ReplicateResponse response;
  const absl::Status status = ps::server::ApplyReplicateRequest(
      request,
      [&](uint32_t shard) -> ps::server::Shard* {
        return shard == 0 ? &complete : shard == 1 ? &waiting : nullptr;
      },
      &response);
  if (!status.ok() && (status.code() != absl::StatusCode::kInvalidArgument ||
                       response.acks_size() != 0)) {
    __builtin_trap();  // refused bytes: INVALID_ARGUMENT, nothing answered
  }
  // What the copies hold is readable whatever they applied.
  std::vector<uint64_t> rows(2), bytes(2);
  complete.AddSizes(&rows, &bytes);
  waiting.AddSizes(&rows, &bytes);
  float out[4];
  const uint64_t key = 7;
  complete.Read(0, absl::MakeConstSpan(&key, 1), out);
  return 0;
}
