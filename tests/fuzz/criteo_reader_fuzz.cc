// libFuzzer target: the Criteo reader (worker/data/criteo_reader.h) over one file holding the
// input's bytes after the first, plain or gzip (as the bytes say). The first byte picks the schema
// (0 to 3 dense and 0 to 3 sparse features) and whether to read by Next() or by NextBlock(); the
// reader must skip or report every malformed line and never crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/criteo_reader.h"

namespace {

// One scratch file per process, rewritten for every input: the reader only reads paths.
const std::string& ScratchPath() {
  static const std::string* const path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") +
                          "/criteo_fuzz_XXXXXX";
    const int fd = mkstemp(pattern.data());
    if (fd < 0) {
      std::perror("mkstemp");
      std::abort();
    }
    close(fd);
    std::atexit([] { unlink(ScratchPath().c_str()); });
    return new std::string(pattern);
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  FILE* f = std::fopen(ScratchPath().c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 1 && std::fwrite(data + 1, 1, size - 1, f) != size - 1) std::abort();
  std::fclose(f);

  ps::worker::SchemaOptions schema;
  schema.num_dense = control & 3;
  schema.num_sparse = (control >> 2) & 3;
  const int world_size = ((control >> 4) & 1) + 1;
  auto reader = ps::worker::CriteoReader::Open({ScratchPath()}, /*rank=*/0, world_size, schema);
  if (!reader.ok()) return 0;  // an empty file
  ps::worker::Batch batch;
  for (int pass = 0; pass < 2; ++pass) {  // twice: Rewind() must start again cleanly
    for (int calls = 0; calls < 1000; ++calls) {
      absl::StatusOr<int64_t> read;
      if (control & 0x20) {
        read = (*reader)->NextBlock(/*block_lines=*/3, /*begin=*/1, /*count=*/2, &batch);
      } else {
        auto n = (*reader)->Next(/*max_samples=*/2, &batch);
        read = n.ok() ? absl::StatusOr<int64_t>(*n) : absl::StatusOr<int64_t>(n.status());
      }
      if (!read.ok() || *read == 0) break;
      if (batch.labels.size() != static_cast<size_t>(batch.size) ||
          batch.keys.size() != static_cast<size_t>(batch.size) * schema.num_sparse) {
        __builtin_trap();
      }
    }
    if (!(*reader)->Rewind().ok()) break;
  }
  return 0;
}
