// A Replicate call's bytes, written and read by hand (common/grpc/wire.h), so that the rows a
// primary streams to its copies (about 136 bytes a key with Adagrad: the key, the row and its
// optimizer state) are copied neither into gRPC's slices when sent nor out of them when received.
//
// The bytes are a ReplicateRequest of proto/ps.proto: what FrameReplicateRequest writes protobuf
// parses, and ReplicateRequestReader reads whatever protobuf writes.
#ifndef PS_SERVER_REPLICATION_REPLICATE_WIRE_H_
#define PS_SERVER_REPLICATION_REPLICATE_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"
#include "server/shard/shard.h"

namespace ps {
namespace server {

// A record as the replicator queues it: immutable, shared by the queues of every copy it goes to
// and by the slices of the calls that carry it.
using SharedRecord = std::shared_ptr<const RecordOut>;

// Rows records whose values are at least this many bytes are sent from the record's own memory
// (a slice of their own); smaller ones, and every other field, are copied into shared slices.
constexpr size_t kAliasedValuesBytes = 4096;

// The ReplicateRequest from `from_server` carrying `records` in order (each RecordOut as its
// whole record), as gRPC sends it. The values of large rows records are not copied: the buffer's
// slices point into the records and keep them alive for as long as gRPC holds the slices.
grpc::ByteBuffer FrameReplicateRequest(uint32_t from_server, absl::Span<const SharedRecord> records);

// One record of a ReplicateRequest as read from gRPC's slices.
struct ReplicatedRecord {
  // The record. For a rows record its rows().values() is empty and `values` says where they are.
  rpc::ShardRecord record;
  // A rows record's values: runs of bytes inside the request's slices that hold them in order
  // (runs may end inside a row). Empty for other records.
  std::vector<absl::string_view> values;
};

// ReplicateRequestReader reads a ReplicateRequest held in a ByteBuffer, leaving the values of its
// rows records in gRPC's slices (the reader shares them). Thread-compatible.
class ReplicateRequestReader {
 public:
  // Parses `buffer`. OK, or INVALID_ARGUMENT saying what is wrong when the bytes are not a
  // ReplicateRequest (a truncated field, a length past its message's end, an unknown wire type,
  // a record with two changes); then records() is empty.
  absl::Status Parse(const grpc::ByteBuffer& buffer);

  uint32_t from_server() const { return from_server_; }

  // The records, in order; valid until the next Parse or the reader's destruction.
  std::vector<ReplicatedRecord>& records() { return records_; }

 private:
  std::vector<grpc::Slice> slices_;
  uint32_t from_server_ = 0;
  std::vector<ReplicatedRecord> records_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_REPLICATION_REPLICATE_WIRE_H_
