// The bytes of the sparse RPCs' large messages, written and read in place over gRPC's slices, so
// that the megabytes of keys, gradients and rows are not copied again by protobuf. The bytes are
// the messages of proto/ps.proto: a server (or a test) parses them with the generated classes.
// Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SPARSE_WIRE_H_
#define PS_CLIENT_INTERNAL_SPARSE_WIRE_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"

namespace ps {
namespace client_internal {

// MessageWriter builds one protobuf message in a single uninitialised buffer, which the finished
// ByteBuffer owns: first the small fields, serialised by protobuf, then length-delimited fields
// whose bytes the caller writes in place. Thread-compatible.
class MessageWriter {
 public:
  // Bytes a length-delimited field adds beyond its contents, at most.
  static constexpr size_t kFieldOverheadBytes = 5 + 10;

  // `capacity` bounds what will be appended: the small message's ByteSizeLong() plus, per bytes
  // field, its size and kFieldOverheadBytes. Exceeding it is a bug and aborts.
  explicit MessageWriter(size_t capacity);
  ~MessageWriter();
  MessageWriter(const MessageWriter&) = delete;
  MessageWriter& operator=(const MessageWriter&) = delete;

  // Appends the fields of `fields` (protobuf merges fields of concatenated messages).
  void AppendMessage(const google::protobuf::MessageLite& fields);

  // Appends the tag and length of bytes field `field` (>= 1) of `size` bytes; returns where the
  // caller writes those bytes (uninitialised).
  char* AppendBytesField(uint32_t field, size_t size);

  // The message. The writer is empty afterwards.
  grpc::ByteBuffer Finish();

 private:
  char* Reserve(size_t bytes);

  char* buffer_;
  size_t capacity_;
  size_t size_ = 0;
};

// PullResponseReader reads a PullResponse held in a ByteBuffer without copying its rows out of
// gRPC's slices; rows may straddle slices. Thread-compatible.
class PullResponseReader {
 public:
  // Parses `buffer` (its slices are shared, not copied). INTERNAL if the bytes are not a
  // PullResponse; then values_size() is 0.
  absl::Status Parse(const grpc::ByteBuffer& buffer);

  uint32_t dim() const { return dim_; }
  // Whether the server wrote the rows into the request's shared slot (PullResponse.
  // values_in_slot); then the values are read from there once ReadFromSlot says where.
  bool values_in_slot() const { return values_in_slot_; }
  // Reads the values from `size` bytes at `data` (a shared slot) instead of the message.
  void ReadFromSlot(const void* data, size_t size);
  // Bytes of the values field.
  size_t values_size() const { return values_size_; }

  // Copies bytes [offset, offset + size) of the values (within values_size()) to `out`. Fastest
  // when successive offsets are close.
  void Copy(size_t offset, size_t size, void* out) {
    const Piece& piece = pieces_[cursor_];
    if (offset >= piece.begin && offset + size <= piece.begin + piece.size) {
      std::memcpy(out, piece.data + (offset - piece.begin), size);
      return;
    }
    CopySlow(offset, size, out);
  }

 private:
  // A run of the values' bytes inside one slice: values [begin, begin + size) are at data.
  struct Piece {
    const char* data;
    size_t begin;
    size_t size;
  };

  void CopySlow(size_t offset, size_t size, void* out);

  std::vector<grpc::Slice> slices_;
  std::vector<Piece> pieces_;
  size_t cursor_ = 0;
  size_t values_size_ = 0;
  uint32_t dim_ = 0;
  bool values_in_slot_ = false;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SPARSE_WIRE_H_
