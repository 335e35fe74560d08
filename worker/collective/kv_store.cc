#include "worker/collective/kv_store.h"

#include <utility>

namespace ps {
namespace worker {

KvStore::KvStore(CoordinatorClient* coordinator, std::string prefix, absl::Duration default_timeout)
    : coordinator_(coordinator), prefix_(std::move(prefix)), default_timeout_(default_timeout) {}

void KvStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = coordinator_->KvSet(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) throw KvStoreError(std::move(status));
}

std::vector<char> KvStore::get(const std::string& key) {
  std::vector<std::string> values = WaitFor({key}, default_timeout_);
  return std::vector<char>(values[0].begin(), values[0].end());
}

void KvStore::wait(const std::vector<std::string>& keys) { WaitFor(keys, default_timeout_); }

void KvStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  WaitFor(keys, timeout == gloo::kNoTimeout ? absl::InfiniteDuration() : absl::FromChrono(timeout));
}

std::vector<std::string> KvStore::Prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  return prefixed;
}

std::vector<std::string> KvStore::WaitFor(const std::vector<std::string>& keys,
                                          absl::Duration timeout) {
  if (keys.empty()) return {};
  absl::StatusOr<std::vector<std::string>> values = coordinator_->KvWait(Prefixed(keys), timeout);
  if (!values.ok()) throw KvStoreError(std::move(values).status());
  if (values->size() != keys.size()) {
    throw KvStoreError(absl::InternalError(
        "the coordinator answered a different number of values than keys asked"));
  }
  return std::move(values).value();
}

}  // namespace worker
}  // namespace ps
