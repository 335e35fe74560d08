#include "server/replication/replicate_wire.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/grpc/wire.h"

namespace ps {
namespace server {
namespace {

using grpc_util::kWireLengthDelimited;
using grpc_util::kWireVarint;
using grpc_util::SliceCursor;
using grpc_util::Tag;
using grpc_util::VarintSize;

// Field numbers of proto/ps.proto.
constexpr uint32_t kRequestFromServer = 2;  // ReplicateRequest
constexpr uint32_t kRequestRecords = 3;
constexpr uint32_t kRecordShard = 1;  // ShardRecord
constexpr uint32_t kRecordSequence = 2;
constexpr uint32_t kRecordWorkerId = 3;
constexpr uint32_t kRecordPushSequence = 4;
constexpr uint32_t kRecordRows = 5;
constexpr uint32_t kRowsTable = 1;  // RowsChange
constexpr uint32_t kRowsKeys = 2;
constexpr uint32_t kRowsValues = 3;

// Bytes of a varint field holding `value`, which proto3 leaves out when it is 0.
size_t VarintFieldSize(uint64_t value) { return value == 0 ? 0 : 1 + VarintSize(value); }

// Bytes of a length-delimited field of `size` bytes (field numbers below 16: a 1-byte tag).
size_t BytesFieldSize(size_t size) { return 1 + VarintSize(size) + size; }

// Builds the ByteBuffer: small bytes are gathered and copied into one slice at a time, large
// values go in slices of their own that point into their record.
class Framer {
 public:
  void Varint(uint64_t value) { grpc_util::AppendVarint(value, &small_); }
  void VarintField(uint32_t field, uint64_t value) {
    if (value == 0) return;
    Varint(Tag(field, kWireVarint));
    Varint(value);
  }
  void Bytes(absl::string_view bytes) { small_.append(bytes.data(), bytes.size()); }
  void BytesField(uint32_t field, absl::string_view bytes) {
    Varint(Tag(field, kWireLengthDelimited));
    Varint(bytes.size());
    Bytes(bytes);
  }
  // `bytes` (inside `*owner`) as a slice of its own, which keeps `owner` alive.
  void Aliased(const SharedRecord& owner, absl::string_view bytes) {
    Flush();
    auto* keep = new SharedRecord(owner);
    slices_.emplace_back(
        const_cast<char*>(bytes.data()), bytes.size(),
        [](void* kept) { delete static_cast<SharedRecord*>(kept); }, keep);
  }
  grpc::ByteBuffer Finish() {
    Flush();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  void Flush() {
    if (small_.empty()) return;
    slices_.emplace_back(small_.data(), small_.size());  // copied
    small_.clear();
  }

  std::string small_;
  std::vector<grpc::Slice> slices_;
};

// Writes a rows record by hand, its values aliased when they are large.
void FrameRowsRecord(const SharedRecord& shared, Framer* out) {
  const rpc::ShardRecord& record = shared->record;
  const rpc::RowsChange& rows = record.rows();
  const absl::string_view values = shared->rows_values();
  const size_t rows_size = VarintFieldSize(rows.table()) +
                           (rows.keys().empty() ? 0 : BytesFieldSize(rows.keys().size())) +
                           (values.empty() ? 0 : BytesFieldSize(values.size()));
  const size_t record_size =
      VarintFieldSize(record.shard()) + VarintFieldSize(record.sequence()) +
      VarintFieldSize(record.worker_id()) + VarintFieldSize(record.push_sequence()) +
      BytesFieldSize(rows_size);
  out->Varint(Tag(kRequestRecords, kWireLengthDelimited));
  out->Varint(record_size);
  out->VarintField(kRecordShard, record.shard());
  out->VarintField(kRecordSequence, record.sequence());
  out->VarintField(kRecordWorkerId, record.worker_id());
  out->VarintField(kRecordPushSequence, record.push_sequence());
  out->Varint(Tag(kRecordRows, kWireLengthDelimited));
  out->Varint(rows_size);
  out->VarintField(kRowsTable, rows.table());
  if (!rows.keys().empty()) out->BytesField(kRowsKeys, rows.keys());
  if (values.empty()) return;
  out->Varint(Tag(kRowsValues, kWireLengthDelimited));
  out->Varint(values.size());
  if (values.size() >= kAliasedValuesBytes) {
    out->Aliased(shared, values);
  } else {
    out->Bytes(values);
  }
}

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError("the Replicate request is not a ReplicateRequest: " + what);
}

// Reads the record of `size` bytes at the cursor into *out.
absl::Status ReadRecord(SliceCursor* in, uint64_t size, ReplicatedRecord* out) {
  const uint64_t end = in->position() + size;
  // The fields read by hand go into the record after protobuf parsed the others (`rest`).
  uint64_t scalars[5] = {0, 0, 0, 0, 0};  // by field number
  bool has_rows = false;
  uint64_t table = 0;
  std::string keys;
  std::string rest;
  while (in->position() < end) {
    uint64_t tag = 0;
    if (!in->ReadVarint(&tag)) return Malformed("a record's field tag is cut off");
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 0) return Malformed("a record has a field numbered 0");
    if (field >= kRecordShard && field <= kRecordPushSequence && wire_type == kWireVarint) {
      if (!in->ReadVarint(&scalars[field])) return Malformed("a record's varint is cut off");
      continue;
    }
    if (field == kRecordRows && wire_type == kWireLengthDelimited) {
      uint64_t rows_size = 0;
      if (!in->ReadVarint(&rows_size)) return Malformed("a rows change's length is cut off");
      // Compared as sizes left, which cannot overflow as positions plus sizes could.
      if (in->position() > end || rows_size > end - in->position()) {
        return Malformed("a rows change runs past its record");
      }
      const uint64_t rows_end = in->position() + rows_size;
      has_rows = true;
      while (in->position() < rows_end) {
        uint64_t rows_tag = 0;
        if (!in->ReadVarint(&rows_tag)) return Malformed("a rows change's tag is cut off");
        const uint64_t rows_field = rows_tag >> 3;
        const uint32_t rows_wire_type = static_cast<uint32_t>(rows_tag & 7);
        uint64_t length = 0;
        if (rows_field == kRowsTable && rows_wire_type == kWireVarint) {
          if (!in->ReadVarint(&table)) return Malformed("a rows change's table is cut off");
        } else if ((rows_field == kRowsKeys || rows_field == kRowsValues) &&
                   rows_wire_type == kWireLengthDelimited) {
          if (!in->ReadVarint(&length) || in->position() > rows_end ||
              length > rows_end - in->position()) {
            return Malformed("keys or values run past their rows change");
          }
          // The last occurrence of a bytes field wins, as in protobuf.
          bool whole = false;
          if (rows_field == kRowsKeys) {
            keys.clear();
            whole = in->Take(length, [&keys](const char* data, size_t n) { keys.append(data, n); });
          } else {
            out->values.clear();
            whole = in->Take(length, [out](const char* data, size_t n) {
              out->values.emplace_back(data, n);
            });
          }
          if (!whole) return Malformed("keys or values are cut off");
        } else if (rows_field == 0 || !in->SkipValue(rows_wire_type)) {
          return Malformed("a rows change holds a malformed field");
        }
        if (in->position() > rows_end) return Malformed("a field runs past its rows change");
      }
      continue;
    }
    // Any other field: its bytes, for protobuf to parse.
    grpc_util::AppendVarint(tag, &rest);
    uint64_t value = 0;
    bool read = false;
    switch (wire_type) {
      case kWireVarint:
        read = in->ReadVarint(&value);
        grpc_util::AppendVarint(value, &rest);
        break;
      case grpc_util::kWireFixed64:
      case grpc_util::kWireFixed32:
        read = in->Take(wire_type == grpc_util::kWireFixed64 ? 8 : 4,
                        [&rest](const char* data, size_t n) { rest.append(data, n); });
        break;
      case kWireLengthDelimited:
        read = in->ReadVarint(&value) && in->position() <= end && value <= end - in->position();
        if (read) {
          grpc_util::AppendVarint(value, &rest);
          read = in->Take(value, [&rest](const char* data, size_t n) { rest.append(data, n); });
        }
        break;
      default:
        break;
    }
    if (!read) return Malformed("a record holds a malformed field");
  }
  if (in->position() != end) return Malformed("a record's last field runs past its end");
  if (!rest.empty() && !out->record.ParseFromString(rest)) {
    return Malformed("a record's fields do not parse as a ShardRecord");
  }
  if (has_rows) {
    if (out->record.change_case() != rpc::ShardRecord::CHANGE_NOT_SET) {
      return Malformed("a record holds two changes");
    }
    rpc::RowsChange* rows = out->record.mutable_rows();
    rows->set_table(static_cast<uint32_t>(table));
    rows->set_keys(std::move(keys));
  }
  // As protobuf would: the low 32 bits of a uint32 field's varint.
  if (scalars[kRecordShard] != 0) {
    out->record.set_shard(static_cast<uint32_t>(scalars[kRecordShard]));
  }
  if (scalars[kRecordSequence] != 0) out->record.set_sequence(scalars[kRecordSequence]);
  if (scalars[kRecordWorkerId] != 0) {
    out->record.set_worker_id(static_cast<uint32_t>(scalars[kRecordWorkerId]));
  }
  if (scalars[kRecordPushSequence] != 0) {
    out->record.set_push_sequence(scalars[kRecordPushSequence]);
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ByteBuffer FrameReplicateRequest(uint32_t from_server,
                                       absl::Span<const SharedRecord> records) {
  Framer out;
  out.VarintField(kRequestFromServer, from_server);
  std::string bytes;
  for (const SharedRecord& record : records) {
    if (record->record.change_case() == rpc::ShardRecord::kRows) {
      FrameRowsRecord(record, &out);
      continue;
    }
    bytes.clear();
    record->record.SerializeToString(&bytes);
    out.BytesField(kRequestRecords, bytes);
  }
  return out.Finish();
}

absl::Status ReplicateRequestReader::Parse(const grpc::ByteBuffer& buffer) {
  slices_.clear();
  records_.clear();
  from_server_ = 0;
  if (buffer.Valid() && !buffer.Dump(&slices_).ok()) {
    return absl::InvalidArgumentError("the Replicate request's bytes cannot be read");
  }
  SliceCursor in(slices_);
  absl::Status status;
  while (status.ok() && !in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag) || (tag >> 3) == 0) {
      status = Malformed("a field tag is cut off or numbered 0");
      break;
    }
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    uint64_t value = 0;
    if (field == kRequestFromServer && wire_type == kWireVarint) {
      if (!in.ReadVarint(&value)) status = Malformed("from_server is cut off");
      from_server_ = static_cast<uint32_t>(value);
    } else if (field == kRequestRecords && wire_type == kWireLengthDelimited) {
      if (!in.ReadVarint(&value)) {
        status = Malformed("a record's length is cut off");
        break;
      }
      records_.emplace_back();
      status = ReadRecord(&in, value, &records_.back());
    } else if (!in.SkipValue(wire_type)) {
      status = Malformed(absl::StrFormat("field %d is cut off or of an unknown wire type", field));
    }
  }
  if (!status.ok()) {
    records_.clear();
    from_server_ = 0;
  }
  return status;
}

}  // namespace server
}  // namespace ps
