#include "server/coordinator/coordinator_store.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace ps {
namespace coordinator {
namespace {

constexpr char kState[] = "state";
constexpr char kClock[] = "clock/";
constexpr char kKv[] = "kv/";

absl::Status Internal(const std::string& dir, const rocksdb::Status& s) {
  return absl::InternalError(absl::StrCat("coordinator data_dir ", dir, ": ", s.ToString()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorStore>> CoordinatorStore::Open(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) return Internal(dir, s);
  return std::unique_ptr<CoordinatorStore>(new CoordinatorStore(dir, db));
}

CoordinatorStore::~CoordinatorStore() { delete db_; }

absl::StatusOr<std::optional<SavedCoordinator>> CoordinatorStore::Load() const {
  SavedCoordinator saved;
  bool any = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    const rocksdb::Slice value = it->value();
    if (key == kState) {
      if (!saved.state.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return absl::DataLossError(
            absl::StrCat("coordinator data_dir ", dir_, ": its state record does not parse"));
      }
      any = true;
    } else if (absl::StartsWith(key, kClock)) {
      int32_t rank;
      int64_t clock;
      if (!absl::SimpleAtoi(key.substr(sizeof(kClock) - 1), &rank) ||
          !absl::SimpleAtoi(value.ToString(), &clock)) {
        return absl::DataLossError(
            absl::StrCat("coordinator data_dir ", dir_, ": bad clock record ", key));
      }
      saved.clocks[rank] = clock;
    } else if (absl::StartsWith(key, kKv)) {
      saved.kv[key.substr(sizeof(kKv) - 1)] = value.ToString();
    }
  }
  if (!it->status().ok()) return Internal(dir_, it->status());
  if (!any) return std::optional<SavedCoordinator>();
  return std::optional<SavedCoordinator>(std::move(saved));
}

absl::Status CoordinatorStore::SaveState(const rpc::CoordinatorState& state) {
  rocksdb::Status s = db_->Put(rocksdb::WriteOptions(), kState, state.SerializeAsString());
  return s.ok() ? absl::OkStatus() : Internal(dir_, s);
}

absl::Status CoordinatorStore::SaveClock(int32_t rank, int64_t clock) {
  rocksdb::Status s =
      db_->Put(rocksdb::WriteOptions(), absl::StrCat(kClock, rank), absl::StrCat(clock));
  return s.ok() ? absl::OkStatus() : Internal(dir_, s);
}

absl::Status CoordinatorStore::SaveKv(absl::string_view key, absl::string_view value) {
  rocksdb::Status s = db_->Put(rocksdb::WriteOptions(), absl::StrCat(kKv, key),
                               rocksdb::Slice(value.data(), value.size()));
  return s.ok() ? absl::OkStatus() : Internal(dir_, s);
}

absl::Status CoordinatorStore::EraseKvPrefix(absl::string_view prefix) {
  rocksdb::WriteBatch batch;
  const std::string start = absl::StrCat(kKv, prefix);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start); it->Valid() && it->key().starts_with(start); it->Next()) {
    batch.Delete(it->key());
  }
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  return s.ok() ? absl::OkStatus() : Internal(dir_, s);
}

}  // namespace coordinator
}  // namespace ps
