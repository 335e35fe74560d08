// Where a coordinator keeps its state so that it survives a restart: a RocksDB database in its
// --data_dir, today's StateStore (state_store.h). Writes go through the database's log (not
// synced: they survive the process being killed, not the machine losing power).
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_STORE_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/state_store.h"

namespace rocksdb {
class DB;
}

namespace ps {
namespace coordinator {

// A CoordinatorStore is the coordinator's database: a StateStore in RocksDB, whose writes are
// unconditional (one coordinator per data_dir, which RocksDB's lock ensures). Thread-compatible
// (the coordinator calls it under its lock).
class CoordinatorStore final : public StateStore {
 public:
  // Opens (creating it if needed) the database in `dir`. INTERNAL with RocksDB's message if it
  // cannot (another coordinator holds it: RocksDB's lock).
  static absl::StatusOr<std::unique_ptr<CoordinatorStore>> Open(const std::string& dir);

  ~CoordinatorStore() override;
  CoordinatorStore(const CoordinatorStore&) = delete;
  CoordinatorStore& operator=(const CoordinatorStore&) = delete;

  const std::string& dir() const { return dir_; }
  // The folder, dir().
  std::string location() const override { return dir_; }

  // What the database holds; nullopt for a new one. DATA_LOSS if a record does not parse;
  // INTERNAL with RocksDB's message when it cannot be read.
  absl::StatusOr<std::optional<SavedCoordinator>> Load() const override;

  // Each replaces what it names; INTERNAL with RocksDB's message on a failure. Never
  // FAILED_PRECONDITION: the writes are not conditional.
  absl::Status SaveState(const rpc::CoordinatorState& state) override;
  absl::Status SaveClock(int32_t rank, int64_t clock) override;
  absl::Status SaveKv(absl::string_view key, absl::string_view value) override;
  absl::Status EraseKvPrefix(absl::string_view prefix) override;

 private:
  CoordinatorStore(std::string dir, rocksdb::DB* db) : dir_(std::move(dir)), db_(db) {}

  const std::string dir_;
  rocksdb::DB* const db_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_STORE_H_
