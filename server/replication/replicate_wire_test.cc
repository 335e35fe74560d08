#include "server/replication/replicate_wire.h"

#include <grpcpp/support/byte_buffer.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ps {
namespace server {
namespace {

std::string RandomBytes(std::mt19937_64* rng, size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>((*rng)() & 0xFF);
  return bytes;
}

// A record of every kind a primary sends: large and small rows (the large ones are aliased),
// sync sums, a step, a dense chunk and a snapshot's parts.
std::vector<SharedRecord> EveryKind(std::mt19937_64* rng) {
  std::vector<SharedRecord> records;
  auto add = [&](rpc::ShardRecord r) {
    records.push_back(std::make_shared<const RecordOut>(RecordOut{std::move(r), nullptr, 0}));
  };
  // A push's rows as a Shard hands them over: values apart (large, then small).
  for (const size_t keys : {size_t{500}, size_t{2}}) {
    RecordOut out;
    out.record.set_shard(2);
    out.record.set_sequence(keys);
    out.record.set_worker_id(1);
    out.record.set_push_sequence(3);
    out.record.mutable_rows()->set_table(1);
    out.record.mutable_rows()->set_keys(RandomBytes(rng, keys * 8));
    const std::string values = RandomBytes(rng, keys * 128);
    out.values.reset(new float[keys * 32]);
    out.value_bytes = values.size();
    std::memcpy(out.values.get(), values.data(), values.size());
    records.push_back(std::make_shared<const RecordOut>(std::move(out)));
  }
  for (const size_t keys : {size_t{1000}, size_t{3}, size_t{0}, size_t{40}}) {
    rpc::ShardRecord r;
    r.set_shard(7);
    r.set_sequence(1u << 20);
    r.set_worker_id(keys == 3 ? 0 : 5);
    r.set_push_sequence(keys * 11);
    r.mutable_rows()->set_table(keys == 40 ? 0 : 2);
    r.mutable_rows()->set_keys(RandomBytes(rng, keys * 8));
    r.mutable_rows()->set_values(RandomBytes(rng, keys * 128));
    add(std::move(r));
  }
  rpc::ShardRecord pending;
  pending.set_shard(3);
  pending.set_sequence(9);
  pending.mutable_pending()->set_keys(RandomBytes(rng, 80));
  pending.mutable_pending()->set_values(RandomBytes(rng, 640));
  add(pending);
  rpc::ShardRecord step;
  step.set_sequence(10);
  step.mutable_step()->set_step(4);
  *step.mutable_step()->add_rows() = pending.pending();
  add(step);
  rpc::ShardRecord dense;
  dense.set_shard(1);
  dense.mutable_dense()->set_name("mlp/w0");
  dense.mutable_dense()->set_values(RandomBytes(rng, 8192));
  add(dense);
  rpc::ShardRecord begin;
  begin.mutable_snapshot_begin()->set_snapshot_id(12);
  add(begin);
  rpc::ShardRecord window;
  window.mutable_window()->set_worker_id(2);
  window.mutable_window()->set_seen(RandomBytes(rng, 64));
  add(window);
  rpc::ShardRecord end;
  end.set_snapshot_end(true);
  add(end);
  return records;
}

rpc::ReplicateRequest ParseWithProtobuf(const grpc::ByteBuffer& buffer) {
  grpc::Slice flat;
  REQUIRE(buffer.DumpToSingleSlice(&flat).ok());
  rpc::ReplicateRequest request;
  REQUIRE(request.ParseFromArray(flat.begin(), static_cast<int>(flat.size())));
  return request;
}

// The bytes of `buffer` cut into slices of `piece` bytes (the last one shorter).
grpc::ByteBuffer Recut(const grpc::ByteBuffer& buffer, size_t piece) {
  grpc::Slice flat;
  REQUIRE(buffer.DumpToSingleSlice(&flat).ok());
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < flat.size(); at += piece) {
    slices.emplace_back(flat.begin() + at, std::min(piece, flat.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The record as sent, from what the reader gave: its values put back from their runs.
std::string Joined(const ReplicatedRecord& read) {
  rpc::ShardRecord record = read.record;
  if (record.has_rows()) {
    CHECK(record.rows().values().empty());
    std::string values;
    for (const absl::string_view run : read.values) values.append(run.data(), run.size());
    record.mutable_rows()->set_values(values);
  } else {
    CHECK(read.values.empty());
  }
  return record.SerializeAsString();
}

TEST_CASE("FrameReplicateRequest writes what protobuf parses as the records", "[replicate_wire]") {
  std::mt19937_64 rng(1);
  const std::vector<SharedRecord> records = EveryKind(&rng);
  const rpc::ReplicateRequest parsed = ParseWithProtobuf(FrameReplicateRequest(42, records));
  CHECK(parsed.from_server() == 42);
  REQUIRE(parsed.records_size() == static_cast<int>(records.size()));
  for (size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(parsed.records(static_cast<int>(i)).SerializeAsString() ==
          records[i]->Whole().SerializeAsString());
  }
}

TEST_CASE("the reader gives back every record, the rows' values in place", "[replicate_wire]") {
  std::mt19937_64 rng(2);
  const std::vector<SharedRecord> records = EveryKind(&rng);
  const grpc::ByteBuffer framed = FrameReplicateRequest(9, records);
  // As framed (the large values in slices of their own), and as gRPC may deliver any message:
  // in slices of any size, fields and rows split between them.
  const size_t piece = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{16384});
  INFO("slices of " << piece << " bytes");
  const grpc::ByteBuffer buffer = piece == 0 ? framed : Recut(framed, piece);
  ReplicateRequestReader reader;
  REQUIRE(reader.Parse(buffer).ok());
  CHECK(reader.from_server() == 9);
  REQUIRE(reader.records().size() == records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(Joined(reader.records()[i]) == records[i]->Whole().SerializeAsString());
  }
  if (piece == 0) {
    // The large rows' values are read where they lie: in the record's own memory, whether the
    // record held them or kept them apart.
    for (const size_t i : {size_t{0}, size_t{2}}) {
      REQUIRE(reader.records()[i].values.size() == 1);
      CHECK(reader.records()[i].values[0].data() == records[i]->rows_values().data());
    }
  }
}

TEST_CASE("the reader reads what protobuf writes", "[replicate_wire]") {
  std::mt19937_64 rng(3);
  const std::vector<SharedRecord> records = EveryKind(&rng);
  rpc::ReplicateRequest request;
  request.set_from_server(3);
  request.mutable_header()->set_map_version(8);
  for (const SharedRecord& r : records) *request.add_records() = r->Whole();
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes.data(), bytes.size());
  ReplicateRequestReader reader;
  REQUIRE(reader.Parse(Recut(grpc::ByteBuffer(&slice, 1), 13)).ok());
  CHECK(reader.from_server() == 3);
  REQUIRE(reader.records().size() == records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    CHECK(Joined(reader.records()[i]) == records[i]->Whole().SerializeAsString());
  }
}

TEST_CASE("the framed buffer keeps its records alive, and only as long as it lives",
          "[replicate_wire]") {
  std::mt19937_64 rng(4);
  std::vector<SharedRecord> records = EveryKind(&rng);
  std::weak_ptr<const RecordOut> large = records[0];
  const std::string expected = records[0]->Whole().SerializeAsString();
  auto buffer = std::make_unique<grpc::ByteBuffer>(FrameReplicateRequest(1, records));
  records.clear();
  REQUIRE(!large.expired());
  CHECK(ParseWithProtobuf(*buffer).records(0).SerializeAsString() == expected);
  buffer.reset();
  CHECK(large.expired());
}

TEST_CASE("bytes that are not a ReplicateRequest are refused, never read past",
          "[replicate_wire]") {
  std::mt19937_64 rng(5);
  const std::vector<SharedRecord> records = EveryKind(&rng);
  grpc::Slice flat;
  REQUIRE(FrameReplicateRequest(1, records).DumpToSingleSlice(&flat).ok());
  const std::string whole(reinterpret_cast<const char*>(flat.begin()), flat.size());
  ReplicateRequestReader reader;

  SECTION("every truncation parses as fewer records or is refused") {
    int refused = 0;
    for (size_t n = 0; n < whole.size(); n += 1 + n / 64) {
      grpc::Slice cut(whole.data(), n);
      const absl::Status status = reader.Parse(grpc::ByteBuffer(&cut, 1));
      if (status.ok()) {
        CHECK(reader.records().size() < records.size());
      } else {
        ++refused;
        CHECK(status.code() == absl::StatusCode::kInvalidArgument);
        CHECK(reader.records().empty());
      }
    }
    CHECK(refused > 0);
  }
  SECTION("random bytes") {
    for (int i = 0; i < 2000; ++i) {
      const std::string junk = RandomBytes(&rng, rng() % 300);
      grpc::Slice slice(junk.data(), junk.size());
      const absl::Status status = reader.Parse(grpc::ByteBuffer(&slice, 1));
      if (!status.ok()) CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    }
  }
  SECTION("a record with rows and another change") {
    rpc::ShardRecord rows;
    rows.mutable_rows()->set_keys(std::string(8, 'k'));
    rpc::ShardRecord end;
    end.set_snapshot_end(true);
    // Two messages concatenated are one message holding both fields: records (field 3) holding
    // it, its length in one byte.
    const std::string record = rows.SerializeAsString() + end.SerializeAsString();
    const std::string bytes = std::string(1, '\x1a') + static_cast<char>(record.size()) + record;
    grpc::Slice slice(bytes.data(), bytes.size());
    const absl::Status status = reader.Parse(grpc::ByteBuffer(&slice, 1));
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(status.message()).find("two changes") != std::string::npos);
  }
  SECTION("lengths that would wrap around past the end") {
    // A record (field 3) of 11 bytes: a rows change (field 5) claiming 2^64 - 1 bytes, which
    // the record's end plus that wraps around to just before it.
    const std::string bytes = std::string("\x1a\x0b\x2a", 3) + std::string(9, '\xff') +
                              std::string("\x01", 1);
    grpc::Slice slice(bytes.data(), bytes.size());
    CHECK(reader.Parse(grpc::ByteBuffer(&slice, 1)).code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("a rows change longer than its record") {
    // Record of 4 bytes: rows (field 5), claiming 100 bytes.
    const std::string bytes = std::string("\x1a\x04\x2a\x64\x08\x01", 6);
    grpc::Slice slice(bytes.data(), bytes.size());
    CHECK(reader.Parse(grpc::ByteBuffer(&slice, 1)).code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace server
}  // namespace ps
