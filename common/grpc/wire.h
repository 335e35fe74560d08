// Protocol Buffers' wire format, written and read by hand over gRPC's slices: for the large
// messages of proto/ps.proto whose megabytes of packed keys and floats should be neither
// serialised by protobuf nor copied out of the slices gRPC received them in.
//
// The bytes are ordinary protobuf messages: what is written here any protobuf parser reads, and
// what protobuf writes is read here.
#ifndef PS_COMMON_GRPC_WIRE_H_
#define PS_COMMON_GRPC_WIRE_H_

#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ps {
namespace grpc_util {

// Protobuf's wire types.
constexpr uint32_t kWireVarint = 0;
constexpr uint32_t kWireFixed64 = 1;
constexpr uint32_t kWireLengthDelimited = 2;
constexpr uint32_t kWireFixed32 = 5;

// Bytes of `value` as a varint (1 to 10).
inline size_t VarintSize(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

// Writes `value` as a varint at `out` (VarintSize(value) bytes); returns the end.
inline char* PutVarint(uint64_t value, char* out) {
  while (value >= 0x80) {
    *out++ = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<char>(value);
  return out;
}

// Appends `value` as a varint to `out`.
inline void AppendVarint(uint64_t value, std::string* out) {
  char bytes[10];
  out->append(bytes, static_cast<size_t>(PutVarint(value, bytes) - bytes));
}

// The tag of field `field` with wire type `wire_type`.
inline uint64_t Tag(uint32_t field, uint32_t wire_type) {
  return (uint64_t{field} << 3) | wire_type;
}

// SliceCursor reads the bytes of a list of slices in order, as one stream. Every read returns
// false, having consumed an unspecified part of what was asked, when fewer bytes are left.
// Thread-compatible; the slices must outlive it.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { SkipEmpty(); }

  bool AtEnd() const { return index_ == slices_.size(); }

  // Bytes read so far.
  uint64_t position() const { return position_; }

  bool ReadByte(uint8_t* byte) {
    if (AtEnd()) return false;
    *byte = slices_[index_].begin()[offset_];
    Advance(1);
    return true;
  }

  // A varint of at most 10 bytes.
  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte = 0;
      if (!ReadByte(&byte)) return false;
      *value |= uint64_t{byte & 0x7Fu} << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // Consumes `size` bytes, calling visit(const char* data, size_t n) for each run of them within
  // one slice, in order.
  template <typename Visit>
  bool Take(uint64_t size, Visit&& visit) {
    while (size > 0) {
      if (AtEnd()) return false;
      const size_t left = slices_[index_].size() - offset_;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(size, left));
      visit(reinterpret_cast<const char*>(slices_[index_].begin()) + offset_, n);
      Advance(n);
      size -= n;
    }
    return true;
  }

  bool Skip(uint64_t size) {
    return Take(size, [](const char*, size_t) {});
  }

  // Skips the value of a field of wire type `wire_type` whose tag was just read; false for a
  // wire type protobuf no longer writes (groups) or an unknown one.
  bool SkipValue(uint32_t wire_type) {
    uint64_t value = 0;
    switch (wire_type) {
      case kWireVarint:
        return ReadVarint(&value);
      case kWireFixed64:
        return Skip(8);
      case kWireFixed32:
        return Skip(4);
      case kWireLengthDelimited:
        return ReadVarint(&value) && Skip(value);
      default:
        return false;
    }
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    position_ += n;
    if (offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  uint64_t position_ = 0;
};

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_WIRE_H_
