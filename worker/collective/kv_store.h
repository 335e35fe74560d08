// A Gloo rendezvous store over the coordinator's key-value store, so that collective groups
// bootstrap through the job's coordinator instead of a file system or Redis.
#ifndef PS_WORKER_COLLECTIVE_KV_STORE_H_
#define PS_WORKER_COLLECTIVE_KV_STORE_H_

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"

namespace ps {
namespace worker {

// What a KvStore throws when the coordinator fails a call. It is a gloo::IoException, like Gloo's
// own store errors, so Gloo handles it as a rendezvous failure; the caller that catches it gets
// the coordinator's status back (DEADLINE_EXCEEDED for a wait that timed out, UNAVAILABLE when the
// coordinator cannot be reached, ...).
class KvStoreError : public gloo::IoException {
 public:
  explicit KvStoreError(absl::Status status)
      : gloo::IoException(status.ToString()), status_(std::move(status)) {}

  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// A KvStore is a gloo::rendezvous::Store whose keys live in the coordinator's rendezvous store
// under `prefix`, so that groups with different prefixes (jobs, groups, generations of a group)
// coexist on one coordinator. Thread-safe (the coordinator client is).
//
// Gloo's API reports errors by throwing, so every method here throws KvStoreError when the
// coordinator fails the call; callers at our own API boundaries catch it and return its status().
class KvStore : public gloo::rendezvous::Store {
 public:
  // `coordinator` must outlive the store. `default_timeout` bounds get() and the wait() without a
  // timeout (Gloo's own stores use Store::kDefaultTimeout, 30 s); absl::InfiniteDuration() waits
  // without a limit.
  KvStore(CoordinatorClient* coordinator, std::string prefix,
          absl::Duration default_timeout = absl::FromChrono(Store::kDefaultTimeout));

  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  const std::string& prefix() const { return prefix_; }

  // Sets (or overwrites) prefix + key. Throws KvStoreError: INVALID_ARGUMENT for an empty key,
  // RESOURCE_EXHAUSTED for a key over 1 KiB or a value over 16 MiB, or the RPC's error.
  void set(const std::string& key, const std::vector<char>& data) override;

  // The value of prefix + key, waiting up to the default timeout for it to be set (as Gloo's file
  // and Redis stores do). Throws KvStoreError: DEADLINE_EXCEEDED when the key is not set in time,
  // or the RPC's error.
  std::vector<char> get(const std::string& key) override;

  // Waits until every key is set: up to the default timeout, or up to `timeout`, where
  // gloo::kNoTimeout (zero) waits without a limit, as in Gloo's stores. Throws KvStoreError:
  // DEADLINE_EXCEEDED naming the missing keys when they are not all set in time, or the RPC's
  // error. Returns at once for no keys.
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const;
  std::vector<std::string> WaitFor(const std::vector<std::string>& keys, absl::Duration timeout);

  // Constant after construction.
  CoordinatorClient* const coordinator_;
  const std::string prefix_;
  const absl::Duration default_timeout_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_KV_STORE_H_
