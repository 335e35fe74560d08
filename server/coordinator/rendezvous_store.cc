#include "server/coordinator/rendezvous_store.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps {
namespace coordinator {
namespace {

// `"a", "b"`, at most 10 keys and then a count.
std::string QuoteKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 10;
  std::vector<std::string> shown;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    shown.push_back(absl::StrCat("\"", keys[i], "\""));
  }
  std::string out = absl::StrJoin(shown, ", ");
  if (keys.size() > kShown) absl::StrAppend(&out, " and ", keys.size() - kShown, " more");
  return out;
}

}  // namespace

absl::Status RendezvousStore::CheckKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > kMaxKeyBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("key of %d bytes is over the limit of %d bytes", key.size(), kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::CheckEntry(absl::string_view key, absl::string_view value) {
  if (absl::Status valid = CheckKey(key); !valid.ok()) return valid;
  if (value.size() > kMaxValueBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("value of %d bytes for key \"%s\" is over the limit of %d bytes",
                        value.size(), key, kMaxValueBytes));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(std::string key, std::string value) {
  if (absl::Status valid = CheckEntry(key, value); !valid.ok()) return valid;
  kv_[std::move(key)] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(
    const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (absl::Status valid = CheckKey(key); !valid.ok()) return valid;
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    auto it = kv_.find(key);
    if (it == kv_.end()) return absl::NotFoundError(absl::StrCat("key \"", key, "\" is not set"));
    values.push_back(it->second);
  }
  return values;
}

std::optional<absl::StatusOr<std::vector<std::string>>> RendezvousStore::Answer(
    const std::vector<std::string>& keys, bool expired) const {
  std::vector<std::string> values;
  values.reserve(keys.size());
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    auto it = kv_.find(key);
    if (it != kv_.end()) {
      values.push_back(it->second);
    } else if (!expired) {
      return std::nullopt;
    } else {
      missing.push_back(key);
    }
  }
  if (missing.empty()) return values;
  return absl::DeadlineExceededError(
      absl::StrCat("kv wait: keys not set by the deadline: ", QuoteKeys(missing)));
}

void RendezvousStore::ErasePrefix(absl::string_view prefix) {
  absl::erase_if(kv_,
                 [prefix](const auto& entry) { return absl::StartsWith(entry.first, prefix); });
}

void RendezvousStore::TakeUp(const std::map<std::string, std::string>& entries) {
  kv_.clear();
  for (const auto& [key, value] : entries) kv_[key] = value;
}

}  // namespace coordinator
}  // namespace ps
