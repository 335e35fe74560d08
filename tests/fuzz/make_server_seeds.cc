// Writes the seed corpus of server_request_fuzz: valid requests of each kind for its job (tables
// "emb" dim 4 and "wide" dim 1 over 4 shards), each file the control byte, then the serialized
// request.
//
//   bazel run //tests/fuzz:make_server_seeds -- $PWD/tests/fuzz/corpus/server_request
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "google/protobuf/message_lite.h"
#include "proto/ps.pb.h"

namespace {

constexpr uint32_t kShards = 4;
constexpr uint8_t kSync = 0x08, kTwice = 0x10;

// Sets the keys and runs of `request` (grouped by shard, as a client sends them); returns the
// keys in the order sent.
template <typename Request>
std::vector<uint64_t> SetKeys(const std::vector<uint64_t>& ids, Request* request) {
  const uint64_t table = ps::NameHash(request->table());
  std::map<uint32_t, std::vector<uint64_t>> by_shard;
  for (uint64_t id : ids) by_shard[ps::ShardOf(table, id, kShards)].push_back(id);
  std::vector<uint64_t> sent;
  for (const auto& [shard, keys] : by_shard) {
    ps::rpc::ShardRun* run = request->add_runs();
    run->set_shard(shard);
    run->set_count(keys.size());
    sent.insert(sent.end(), keys.begin(), keys.end());
  }
  request->set_keys(std::string(reinterpret_cast<const char*>(sent.data()), sent.size() * 8));
  return sent;
}

std::string Floats(size_t n, float value) {
  const std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()), n * sizeof(float));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  std::vector<std::pair<std::string, std::pair<uint8_t, std::string>>> seeds;
  auto add = [&](const std::string& name, uint8_t control,
                 const google::protobuf::MessageLite& m) {
    seeds.push_back({name, {control, m.SerializeAsString()}});
  };
  for (const auto& [table, dim] : std::vector<std::pair<std::string, int>>{{"emb", 4}, {"wide", 1}}) {
    ps::rpc::PullRequest pull;
    pull.set_table(table);
    pull.mutable_header()->set_clock(-1);
    SetKeys({1, 2, 3, 40, 41}, &pull);
    add("pull_" + table, 0, pull);

    ps::rpc::PushRequest push;
    push.set_table(table);
    push.mutable_header()->set_worker_id(1);
    push.mutable_header()->set_sequence(1);
    push.mutable_header()->set_clock(-1);
    const std::vector<uint64_t> sent = SetKeys({1, 2, 2, 7}, &push);
    push.set_grads(Floats(sent.size() * dim, 0.5f));
    add("push_" + table, 1, push);
    add("push_twice_" + table, 1 | kTwice, push);
    push.mutable_header()->set_clock(0);
    add("push_sync_" + table, 1 | kSync, push);
  }
  ps::rpc::PullDenseRequest pull_dense;
  pull_dense.set_name("head");
  pull_dense.add_chunks(0);
  add("pull_dense", 2, pull_dense);
  for (const auto kind : {ps::rpc::PushDenseRequest::ASSIGN, ps::rpc::PushDenseRequest::GRADIENT}) {
    ps::rpc::PushDenseRequest push_dense;
    push_dense.set_name("head");
    push_dense.set_total_floats(6);
    push_dense.set_kind(kind);
    push_dense.mutable_header()->set_worker_id(1);
    push_dense.mutable_header()->set_sequence(1);
    ps::rpc::DenseChunk* chunk = push_dense.add_chunks();
    chunk->set_chunk(0);
    chunk->set_values(Floats(6, 1.0f));
    add(kind == ps::rpc::PushDenseRequest::ASSIGN ? "push_dense_assign" : "push_dense_gradient",
        3, push_dense);
  }
  ps::rpc::EndStepRequest end;
  end.mutable_header()->set_worker_id(1);
  end.mutable_header()->set_clock(0);
  add("end_step_sync", 4 | kSync, end);
  add("end_step_async", 4, end);

  for (const auto& [name, seed] : seeds) {
    std::ofstream out(std::string(argv[1]) + "/" + name, std::ios::binary);
    out.put(static_cast<char>(seed.first));
    out << seed.second;
    if (!out) {
      std::perror(name.c_str());
      return 1;
    }
  }
  return 0;
}
