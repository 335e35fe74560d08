#include "client/internal/sparse_wire.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/grpc/wire.h"

namespace ps {
namespace client_internal {
namespace {

using grpc_util::kWireLengthDelimited;
using grpc_util::kWireVarint;
using grpc_util::PutVarint;
using grpc_util::SliceCursor;

// PullResponse's fields (proto/ps.proto).
constexpr uint32_t kValuesField = 1;
constexpr uint32_t kDimField = 2;
constexpr uint32_t kValuesInSlotField = 3;

// Where the values of a response without values are.
constexpr char kNothing[1] = {0};

}  // namespace

MessageWriter::MessageWriter(size_t capacity)
    : buffer_(static_cast<char*>(std::malloc(std::max<size_t>(capacity, 1)))), capacity_(capacity) {
  if (buffer_ == nullptr) std::abort();  // as operator new would
}

MessageWriter::~MessageWriter() { std::free(buffer_); }

char* MessageWriter::Reserve(size_t bytes) {
  if (buffer_ == nullptr || bytes > capacity_ - size_) {
    std::fprintf(stderr, "MessageWriter: %zu bytes beyond its capacity of %zu\n", bytes, capacity_);
    std::abort();
  }
  char* at = buffer_ + size_;
  size_ += bytes;
  return at;
}

void MessageWriter::AppendMessage(const google::protobuf::MessageLite& fields) {
  const size_t size = fields.ByteSizeLong();
  fields.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(Reserve(size)));
}

char* MessageWriter::AppendBytesField(uint32_t field, size_t size) {
  char header[kFieldOverheadBytes];
  char* end = PutVarint((uint64_t{field} << 3) | kWireLengthDelimited, header);
  end = PutVarint(size, end);
  const size_t header_bytes = static_cast<size_t>(end - header);
  std::memcpy(Reserve(header_bytes), header, header_bytes);
  return Reserve(size);
}

grpc::ByteBuffer MessageWriter::Finish() {
  grpc::Slice slice(buffer_, size_, [](void* buffer) { std::free(buffer); });
  buffer_ = nullptr;
  capacity_ = 0;
  size_ = 0;
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status PullResponseReader::Parse(const grpc::ByteBuffer& buffer) {
  slices_.clear();
  pieces_.clear();
  cursor_ = 0;
  values_size_ = 0;
  dim_ = 0;
  values_in_slot_ = false;
  if (buffer.Valid() && !buffer.Dump(&slices_).ok()) {
    return absl::InternalError("unreadable PullResponse");
  }
  SliceCursor in(slices_);
  auto malformed = [this] {
    pieces_.assign(1, Piece{kNothing, 0, 0});
    values_size_ = 0;
    dim_ = 0;
    values_in_slot_ = false;
    return absl::InternalError("malformed PullResponse");
  };
  while (!in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag) || (tag >> 3) == 0) return malformed();
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    uint64_t value = 0;
    if (field == kDimField && wire_type == kWireVarint) {
      if (!in.ReadVarint(&value)) return malformed();
      dim_ = static_cast<uint32_t>(value);
    } else if (field == kValuesInSlotField && wire_type == kWireVarint) {
      if (!in.ReadVarint(&value)) return malformed();
      values_in_slot_ = value != 0;
    } else if (field == kValuesField && wire_type == kWireLengthDelimited) {
      if (!in.ReadVarint(&value)) return malformed();
      // The last occurrence of a bytes field wins.
      pieces_.clear();
      size_t begin = 0;
      const bool whole = in.Take(value, [this, &begin](const char* data, size_t n) {
        pieces_.push_back(Piece{data, begin, n});
        begin += n;
      });
      if (!whole) return malformed();
      values_size_ = begin;
    } else if (!in.SkipValue(wire_type)) {
      return malformed();
    }
  }
  if (pieces_.empty()) {
    // No values: a piece of nothing keeps Copy's fast path free of a check.
    pieces_.push_back(Piece{kNothing, 0, 0});
  }
  return absl::OkStatus();
}

void PullResponseReader::ReadFromSlot(const void* data, size_t size) {
  pieces_.assign(1, Piece{static_cast<const char*>(data), 0, size});
  cursor_ = 0;
  values_size_ = size;
}

void PullResponseReader::CopySlow(size_t offset, size_t size, void* out) {
  // The first piece that ends after `offset`.
  auto it =
      std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                       [](size_t at, const Piece& piece) { return at < piece.begin + piece.size; });
  char* dst = static_cast<char*>(out);
  while (size > 0) {
    const size_t skip = offset - it->begin;
    const size_t n = std::min(size, it->size - skip);
    std::memcpy(dst, it->data + skip, n);
    dst += n;
    offset += n;
    size -= n;
    cursor_ = static_cast<size_t>(it - pieces_.begin());
    if (size > 0) ++it;
  }
}

}  // namespace client_internal
}  // namespace ps
