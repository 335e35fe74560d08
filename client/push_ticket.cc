#include "client/push_ticket.h"

#include <cstring>
#include <utility>

#include "absl/strings/cord.h"
#include "common/hash.h"

namespace ps {
namespace {

constexpr uint32_t kVersion = 1;

template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

template <typename T>
bool Get(absl::string_view* in, T* value) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(value, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

}  // namespace

uint64_t PushTicket::first_sequence() const { return runs.empty() ? 0 : runs.front().sequence; }
uint64_t PushTicket::last_sequence() const { return runs.empty() ? 0 : runs.back().sequence; }

std::string PushTicket::Encode() const {
  std::string out;
  out.reserve(40 + table.size() + runs.size() * sizeof(Run));
  Put(&out, kVersion);
  Put(&out, worker_id);
  Put(&out, clock);
  Put(&out, fingerprint);
  Put(&out, static_cast<uint32_t>(table.size()));
  out.append(table);
  Put(&out, static_cast<uint32_t>(runs.size()));
  for (const Run& run : runs) {
    Put(&out, run.sequence);
    Put(&out, run.shard);
    Put(&out, run.offset);
    Put(&out, run.count);
  }
  return out;
}

std::optional<PushTicket> PushTicket::Decode(absl::string_view in) {
  PushTicket ticket;
  uint32_t version = 0;
  uint32_t table_size = 0;
  uint32_t num_runs = 0;
  if (!Get(&in, &version) || version != kVersion || !Get(&in, &ticket.worker_id) ||
      !Get(&in, &ticket.clock) || !Get(&in, &ticket.fingerprint) || !Get(&in, &table_size) ||
      in.size() < table_size) {
    return std::nullopt;
  }
  ticket.table = std::string(in.substr(0, table_size));
  in.remove_prefix(table_size);
  if (!Get(&in, &num_runs) || in.size() != size_t{num_runs} * 20) return std::nullopt;
  ticket.runs.resize(num_runs);
  for (Run& run : ticket.runs) {
    Get(&in, &run.sequence);
    Get(&in, &run.shard);
    Get(&in, &run.offset);
    Get(&in, &run.count);
  }
  return ticket;
}

std::optional<PushTicket> PushTicket::FromStatus(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  const auto payload = status.GetPayload(kTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  return Decode(std::string(*payload));
}

absl::Status PushTicket::AttachTo(absl::Status status) const {
  if (!status.ok()) status.SetPayload(kTypeUrl, absl::Cord(Encode()));
  return status;
}

uint64_t PushTicket::Fingerprint(absl::Span<const uint64_t> keys, absl::Span<const float> grads) {
  const uint64_t h = XXH3_64bits(keys.data(), keys.size() * sizeof(uint64_t));
  return XXH3_64bits_withSeed(grads.data(), grads.size() * sizeof(float), h);
}

}  // namespace ps
