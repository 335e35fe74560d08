#include "client/internal/sparse_wire.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {
namespace {

// `bytes` cut into slices at the given sizes (the rest in a last slice), as gRPC receives them.
grpc::ByteBuffer Sliced(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t cut : cuts) {
    cut = std::min(cut, bytes.size() - at);
    slices.emplace_back(bytes.data() + at, cut);
    at += cut;
  }
  slices.emplace_back(bytes.data() + at, bytes.size() - at);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST_CASE("MessageWriter builds a PullRequest and a PushRequest protobuf parses", "[sparse_wire]") {
  const bool push = GENERATE(false, true);
  rpc::PushRequest fields;
  fields.mutable_header()->set_map_version(7);
  fields.mutable_header()->set_sequence(99);
  fields.mutable_header()->set_clock(-1);
  fields.set_table("user");
  rpc::ShardRun* run = fields.add_runs();
  run->set_shard(3);
  run->set_count(200);
  std::vector<uint64_t> keys(200);
  std::vector<float> grads(200 * 4);
  std::mt19937_64 rng(1);
  for (auto& k : keys) k = rng();
  for (auto& g : grads) g = static_cast<float>(rng() % 1000) / 7;

  const size_t key_bytes = keys.size() * 8;
  const size_t grad_bytes = grads.size() * 4;
  MessageWriter writer(fields.ByteSizeLong() + 2 * MessageWriter::kFieldOverheadBytes + key_bytes +
                       grad_bytes);
  writer.AppendMessage(fields);
  std::memcpy(writer.AppendBytesField(3, key_bytes), keys.data(), key_bytes);
  if (push) std::memcpy(writer.AppendBytesField(5, grad_bytes), grads.data(), grad_bytes);
  const grpc::ByteBuffer buffer = writer.Finish();

  rpc::PushRequest parsed;
  REQUIRE(parsed.ParseFromString(Flat(buffer)));
  CHECK(parsed.header().map_version() == 7);
  CHECK(parsed.header().sequence() == 99);
  CHECK(parsed.header().clock() == -1);
  CHECK(parsed.table() == "user");
  REQUIRE(parsed.runs_size() == 1);
  CHECK(parsed.runs(0).count() == 200);
  CHECK(parsed.keys() == std::string(reinterpret_cast<const char*>(keys.data()), key_bytes));
  CHECK(parsed.grads() ==
        (push ? std::string(reinterpret_cast<const char*>(grads.data()), grad_bytes) : ""));
  rpc::PullRequest as_pull;  // a PullRequest's fields are a prefix of a PushRequest's
  REQUIRE(as_pull.ParseFromString(Flat(buffer)));
  CHECK(as_pull.keys() == parsed.keys());
}

TEST_CASE("PullResponseReader reads rows that straddle slices", "[sparse_wire]") {
  const size_t slice_size = GENERATE(1, 3, 7, 64, 1000, 100000);
  rpc::PullResponse response;
  std::vector<float> rows(500 * 16);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.25f * i;
  response.set_values(std::string(reinterpret_cast<const char*>(rows.data()), rows.size() * 4));
  response.set_dim(16);
  std::string bytes = response.SerializeAsString();
  // An unknown field of each wire type after the known ones: skipped.
  bytes += std::string("\x18\x96\x01", 3);  // field 3, varint
  bytes += std::string(
      "\x21"
      "12345678",
      9);  // field 4, fixed64
  bytes += std::string(
      "\x2a\x03"
      "abc",
      5);  // field 5, length-delimited
  bytes += std::string(
      "\x35"
      "1234",
      5);  // field 6, fixed32
  std::vector<size_t> cuts(bytes.size() / slice_size, slice_size);

  PullResponseReader reader;
  REQUIRE(reader.Parse(Sliced(bytes, cuts)).ok());
  CHECK(reader.dim() == 16);
  REQUIRE(reader.values_size() == rows.size() * 4);
  // Rows in order, backwards and at random, as a scatter with repeated keys reads them.
  std::mt19937 rng(5);
  std::vector<size_t> order;
  for (size_t r = 0; r < 500; ++r) order.push_back(r);
  for (size_t r = 500; r-- > 0;) order.push_back(r);
  for (int i = 0; i < 500; ++i) order.push_back(rng() % 500);
  for (size_t r : order) {
    float got[16];
    reader.Copy(r * 64, 64, got);
    REQUIRE(std::memcmp(got, rows.data() + r * 16, 64) == 0);
  }
}

TEST_CASE("PullResponseReader refuses malformed bytes", "[sparse_wire]") {
  rpc::PullResponse response;
  response.set_values(std::string(100, 'x'));
  response.set_dim(4);
  const std::string good = response.SerializeAsString();
  PullResponseReader reader;
  CHECK(reader.Parse(Sliced(good.substr(0, 50), {10})).code() == absl::StatusCode::kInternal);
  CHECK(reader.values_size() == 0);
  CHECK(reader.Parse(Sliced(std::string("\x0a\xff", 2), {})).code() == absl::StatusCode::kInternal);
  CHECK(reader.Parse(Sliced(std::string("\x00\x01", 2), {})).code() == absl::StatusCode::kInternal);
  CHECK(reader.Parse(Sliced(std::string("\x0b", 1), {})).code() == absl::StatusCode::kInternal);
  // The empty message: no values.
  REQUIRE(reader.Parse(grpc::ByteBuffer()).ok());
  CHECK(reader.values_size() == 0);
  CHECK(reader.dim() == 0);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps
