// libFuzzer target: a server's request decoding and validation. The bytes after the first are
// parsed as the request that the first byte picks (Pull, Push, PullDense, PushDense or EndStep),
// and a ShardedStore (server/sharded_store.h) serving every shard of a small two-table job is
// driven with it, as ParameterServerService does. Bad input must give an error status, never a
// crash. Bit 3 of the first byte picks sync mode (steps, EndStep, quorum) over async; bit 4 sends
// the request twice (a retry).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/job_config.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "server/sharded_store.h"

namespace {

constexpr uint32_t kShards = 4;

ps::config::Job FuzzJob(bool sync) {
  absl::StatusOr<ps::config::Job> job = ps::ParseJob(
      std::string(R"pb(
        tables {
          name: "emb"
          dim: 4
          initializer { kind: UNIFORM low: -1 high: 1 }
          optimizer { type: "sgd" learning_rate: 0.5 }
        }
        tables {
          name: "wide"
          dim: 1
          optimizer { type: "adagrad" learning_rate: 0.1 initial_accumulator: 0.1 }
        }
        cluster { num_shards: 4 num_servers: 1 num_workers: 2 max_message_bytes: 1048576 }
        training { dense_optimizer { type: "adam" learning_rate: 0.01 } mode: )pb") +
          (sync ? "SYNC" : "ASYNC") + " }",
      "fuzz.pbtxt");
  if (!job.ok()) {  // a broken fixture, not a finding
    std::fprintf(stderr, "FuzzJob: %s\n", job.status().ToString().c_str());
    std::abort();
  }
  return *job;
}

// Version 1 of a map in which this server (0) is the primary of every shard.
ps::rpc::ShardMap AllShardsMap() {
  ps::rpc::ShardMap map;
  map.set_version(1);
  map.set_num_shards(kShards);
  for (uint32_t s = 0; s < kShards; ++s) {
    ps::rpc::ShardAssignment* a = map.add_shards();
    a->set_shard(s);
    a->set_primary(0);
  }
  return map;
}

std::unique_ptr<ps::server::ShardedStore> ServingStore(bool sync) {
  static const ps::config::Job* const jobs[2] = {new ps::config::Job(FuzzJob(false)),
                                                 new ps::config::Job(FuzzJob(true))};
  auto store = ps::server::ShardedStore::Create(*jobs[sync], {});
  if (!store.ok()) std::abort();
  (*store)->SetShardMap(AllShardsMap(), 0);
  return std::move(*store);
}

template <typename Request>
bool Parse(absl::string_view bytes, Request* request) {
  return request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void Serve(ps::server::ShardedStore& store, uint8_t kind, absl::string_view bytes) {
  switch (kind % 5) {
    case 0: {
      ps::rpc::PullRequest request;
      if (!Parse(bytes, &request)) return;
      ps::rpc::PullResponse response;
      const absl::Status status = store.Pull(request, &response);
      if (status.ok() && response.values().size() !=
                             request.keys().size() / sizeof(uint64_t) * response.dim() *
                                 sizeof(float)) {
        __builtin_trap();  // a pull that succeeded must answer one row per key
      }
      return;
    }
    case 1: {
      ps::rpc::PushRequest request;
      if (!Parse(bytes, &request)) return;
      uint32_t duplicates = 0, late = 0;
      std::vector<std::pair<uint32_t, uint64_t>> replicated_at;
      store.Push(request, &duplicates, &late, &replicated_at).IgnoreError();
      return;
    }
    case 2: {
      ps::rpc::PullDenseRequest request;
      if (!Parse(bytes, &request)) return;
      ps::rpc::PullDenseResponse response;
      store.PullDense(request, &response).IgnoreError();
      return;
    }
    case 3: {
      ps::rpc::PushDenseRequest request;
      if (!Parse(bytes, &request)) return;
      std::vector<std::pair<uint32_t, uint64_t>> replicated_at;
      store.PushDense(request, &replicated_at).IgnoreError();
      return;
    }
    case 4: {
      ps::rpc::EndStepRequest request;
      if (!Parse(bytes, &request)) return;
      store.EndStep(request.header().worker_id(), request.header().clock()).status().IgnoreError();
      return;
    }
  }
}

}  // namespace

// Protobuf logs every string field of invalid UTF-8 it parses: silenced, it would be most of the
// run's time and output.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  // A fresh store per input, so that a crash replays from its input alone.
  std::unique_ptr<ps::server::ShardedStore> store = ServingStore((control & 0x08) != 0);
  Serve(*store, control & 7, bytes);
  if (control & 0x10) Serve(*store, control & 7, bytes);
  ps::rpc::ServerStatus status;
  store->FillStatus(&status);
  store->Shutdown();
  return 0;
}
