// libFuzzer target: the client's reading of a PullResponse in place over gRPC's slices
// (client/internal/sparse_wire.h, PullResponseReader), checked against protobuf's parser. The
// first byte picks how the rest is cut into slices and how the values are copied out. Whenever
// both parsers accept the bytes they must agree on dim and on every byte of values; the reader
// must never read outside the buffer.
#include <fuzzer/FuzzedDataProvider.h>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "client/internal/sparse_wire.h"
#include "proto/ps.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  // Slices of 1 to 16 bytes (or one slice), as gRPC may hand them over.
  const size_t slice_bytes = (control & 0x0f) == 0 ? std::max<size_t>(bytes.size(), 1)
                                                   : (control & 0x0f);
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += slice_bytes) {
    slices.emplace_back(bytes.data() + at, std::min(slice_bytes, bytes.size() - at));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());

  ps::client_internal::PullResponseReader reader;
  if (!reader.Parse(buffer).ok()) {
    if (reader.values_size() != 0 || reader.dim() != 0) __builtin_trap();
    return 0;
  }
  std::string values(reader.values_size(), '\0');
  // Copied in chunks of 1 to 16 bytes, or all at once; then once more backwards by 4 bytes.
  const size_t chunk = (control >> 4) == 0 ? std::max<size_t>(values.size(), 1) : (control >> 4);
  for (size_t at = 0; at < values.size(); at += chunk) {
    reader.Copy(at, std::min(chunk, values.size() - at), values.data() + at);
  }
  for (size_t end = values.size() / 4 * 4; end >= 4; end -= 4) {
    char row[4];
    reader.Copy(end - 4, 4, row);
    if (std::memcmp(row, values.data() + end - 4, 4) != 0) __builtin_trap();
  }

  ps::rpc::PullResponse expected;
  if (!expected.ParseFromString(bytes)) return 0;  // a tag protobuf refuses and the reader skips
  if (expected.dim() != reader.dim() || expected.values() != values) __builtin_trap();
  return 0;
}
