// Writes the seed corpus of replicate_request_fuzz: Replicate requests of each kind of record for
// its job (tables "emb" dim 4 with Adagrad, "wide" dim 1 with SGD), framed as a primary sends
// them, each file the control byte (the slice size), then the request's bytes.
//
//   bazel run //tests/fuzz:make_replicate_seeds -- $PWD/tests/fuzz/corpus/replicate_request
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proto/ps.pb.h"
#include "server/replication/replicate_wire.h"

namespace {

using ps::server::RecordOut;
using ps::server::SharedRecord;

SharedRecord Shared(ps::rpc::ShardRecord record) {
  return std::make_shared<const RecordOut>(RecordOut{std::move(record), nullptr, 0});
}

// A push's rows of `keys` keys of table `table` (row_floats floats each), values apart.
SharedRecord Rows(uint32_t shard, uint64_t sequence, uint32_t table, size_t keys,
                  size_t row_floats) {
  RecordOut out;
  out.record.set_shard(shard);
  out.record.set_sequence(sequence);
  out.record.set_worker_id(3);
  out.record.set_push_sequence(sequence);
  out.record.mutable_rows()->set_table(table);
  std::vector<uint64_t> ids(keys);
  for (size_t i = 0; i < keys; ++i) ids[i] = i * 2654435761u;
  out.record.mutable_rows()->set_keys(
      std::string(reinterpret_cast<const char*>(ids.data()), keys * 8));
  out.values.reset(new float[keys * row_floats]);
  out.value_bytes = keys * row_floats * sizeof(float);
  for (size_t i = 0; i < keys * row_floats; ++i) out.values[i] = 0.01f * static_cast<float>(i);
  return std::make_shared<const RecordOut>(std::move(out));
}

std::string Bytes(const std::vector<SharedRecord>& records) {
  grpc::Slice flat;
  if (!ps::server::FrameReplicateRequest(1, records).DumpToSingleSlice(&flat).ok()) return "";
  return std::string(reinterpret_cast<const char*>(flat.begin()), flat.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> seeds;
  // A stream for the complete copy (shard 0): two pushes' rows, a dense chunk.
  ps::rpc::ShardRecord dense;
  dense.set_shard(0);
  dense.set_sequence(3);
  dense.mutable_dense()->set_name("mlp");
  dense.mutable_dense()->set_total_floats(4);
  dense.mutable_dense()->set_values(std::string(16, '\0'));
  seeds.push_back({"stream", Bytes({Rows(0, 1, 0, 40, 8), Rows(0, 2, 1, 5, 1), Shared(dense)})});
  // A snapshot for the waiting copy (shard 1): begin, rows, a window entry, end.
  ps::rpc::ShardRecord begin, window, end;
  for (ps::rpc::ShardRecord* r : {&begin, &window, &end}) {
    r->set_shard(1);
    r->set_sequence(9);
  }
  begin.mutable_snapshot_begin()->set_snapshot_id(4);
  window.mutable_window()->set_worker_id(3);
  window.mutable_window()->set_highest(9);
  window.mutable_window()->set_seen(std::string(ps::server::kAliasedValuesBytes / 64, '\0'));
  end.set_snapshot_end(true);
  seeds.push_back({"snapshot", Bytes({Shared(begin), Rows(1, 9, 0, 600, 8), Shared(window),
                                      Shared(end)})});
  // Sync: a step's pending sums, then the step.
  ps::rpc::ShardRecord pending, step;
  pending.set_shard(0);
  pending.set_sequence(1);
  pending.mutable_pending()->set_keys(std::string(16, '\1'));
  pending.mutable_pending()->set_values(std::string(32, '\0'));
  step.set_shard(0);
  step.set_sequence(2);
  step.mutable_step()->set_step(0);
  *step.mutable_step()->add_rows() = pending.pending();
  step.mutable_step()->mutable_rows(0)->set_values(std::string(64, '\0'));
  seeds.push_back({"sync_step", Bytes({Shared(pending), Shared(step)})});
  int written = 0;
  for (const auto& [name, bytes] : seeds) {
    // Whole, and in slices of 7 bytes; sync mode (bit 7) for the sync seed.
    for (const uint8_t slices : {uint8_t{0}, uint8_t{7}}) {
      const uint8_t control = slices | (name == "sync_step" ? 0x80 : 0);
      std::ofstream out(std::string(argv[1]) + "/" + name + (slices ? "_sliced" : ""),
                        std::ios::binary);
      out.put(static_cast<char>(control));
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", name.c_str());
        return 1;
      }
      ++written;
    }
  }
  std::printf("wrote %d seeds\n", written);
  return 0;
}
