// The rendezvous key-value store through which a job's processes find each other (Gloo's and
// NCCL's bootstrap, the checkpoints' worker states): small keys, values up to 16 MiB.
#ifndef PS_SERVER_COORDINATOR_RENDEZVOUS_STORE_H_
#define PS_SERVER_COORDINATOR_RENDEZVOUS_STORE_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace coordinator {

// A RendezvousStore maps keys to values, checking both against its bounds. It does not wait or
// persist: the coordinator answers waits from it (Lookup) and writes its changes to the state
// store. Thread-compatible (the coordinator calls it under its lock).
class RendezvousStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1 << 10;
  static constexpr size_t kMaxValueBytes = 16 << 20;

  // OK for a key the store accepts; INVALID_ARGUMENT for an empty key; RESOURCE_EXHAUSTED for one
  // over kMaxKeyBytes.
  static absl::Status CheckKey(absl::string_view key);
  // CheckKey's outcomes, and RESOURCE_EXHAUSTED for a value over kMaxValueBytes.
  static absl::Status CheckEntry(absl::string_view key, absl::string_view value);

  // Sets (or overwrites) `key`. Fails as CheckEntry, changing nothing.
  absl::Status Set(std::string key, std::string value);

  // The values of `keys`, in order. CheckKey's errors for the first bad key; NOT_FOUND naming the
  // first key that is not set.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys) const;

  // A KvWait's answer: the values of `keys` (assumed to pass CheckKey), in order, when every one
  // is set; otherwise nullopt, or DEADLINE_EXCEEDED naming the keys not set (at most 10, then a
  // count) when `expired`.
  std::optional<absl::StatusOr<std::vector<std::string>>> Answer(
      const std::vector<std::string>& keys, bool expired) const;

  // Removes every key that starts with `prefix`.
  void ErasePrefix(absl::string_view prefix);

  // Replaces the contents with `entries` (as a state store kept them), unchecked.
  void TakeUp(const std::map<std::string, std::string>& entries);

  size_t size() const { return kv_.size(); }

 private:
  absl::flat_hash_map<std::string, std::string> kv_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_RENDEZVOUS_STORE_H_
