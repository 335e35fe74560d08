// A PushTicket is the identity of one Push call: which sequence numbers (proto/ps.proto rule 5)
// carried which of its keys, so that a Push that failed can be made again and every server's
// part is applied exactly once (Client::RetryPush).
//
// Why: a Push goes to every server owning some of its keys, in requests of their own. When the
// retries of one request run out (ClientOptions.retry_timeout), the others may have been
// applied. Pushing again would number the requests anew and apply those parts twice; resending
// every part with its original sequence does not: each shard's window answers a sequence it
// applied as a duplicate (OK, PushResponse.duplicate_keys) and applies the ones it never saw.
#ifndef PS_CLIENT_PUSH_TICKET_H_
#define PS_CLIENT_PUSH_TICKET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sequence_window.h"

namespace ps {

// A PushTicket is a value (copyable, thread-compatible). Every failed Push (and PushAsync,
// RetryPush) whose requests were numbered carries one in its status (FromStatus); one that
// failed before (unknown table, wrong lengths, a NaN or Inf gradient) carries none, and nothing
// of it was applied.
struct PushTicket {
  // `count` of the call's distinct keys of shard `shard`, from the `offset`-th on (in the order
  // they first appear in the call's keys), went in the request numbered `sequence`.
  struct Run {
    uint64_t sequence = 0;
    uint32_t shard = 0;
    uint32_t offset = 0;
    uint32_t count = 0;

    bool operator==(const Run& other) const {
      return sequence == other.sequence && shard == other.shard && offset == other.offset &&
             count == other.count;
    }
  };

  // The status payload's type URL (absl::Status::SetPayload).
  static constexpr char kTypeUrl[] = "type.googleapis.com/ps.client.PushTicket";
  // How far below a worker's newest sequence a shard still tells whether it applied one
  // (proto/ps.proto rule 5; server/storage/apply_window.h): a ticket whose first sequence is
  // further below the client's newest cannot be made again.
  static constexpr uint64_t kWindow = kSequenceWindow;

  // The worker id of the client that made the call (Client::worker_id): only that client, while
  // it lives, may make the call again.
  uint32_t worker_id = 0;
  // The table, the step clock the call carried, and Fingerprint(keys, grads) of its arguments.
  std::string table;
  int64_t clock = -1;
  uint64_t fingerprint = 0;
  // Its requests' keys, by ascending sequence.
  std::vector<Run> runs;

  // The lowest and highest sequence of the call; 0 without runs.
  uint64_t first_sequence() const;
  uint64_t last_sequence() const;

  // The bytes of the ticket, and the ticket of such bytes: nullopt for bytes that are not one.
  std::string Encode() const;
  static std::optional<PushTicket> Decode(absl::string_view bytes);

  // The ticket `status` carries; nullopt for OK, or a status without one (nothing of that call
  // was applied, or it was no Push).
  static std::optional<PushTicket> FromStatus(const absl::Status& status);
  // `status` with this ticket attached (an OK status stays OK, without it).
  absl::Status AttachTo(absl::Status status) const;

  // XXH3-64 of the keys' bytes, then of the gradients' bytes seeded with the first: what
  // RetryPush compares to tell that it was given the same keys and gradients.
  static uint64_t Fingerprint(absl::Span<const uint64_t> keys, absl::Span<const float> grads);

  bool operator==(const PushTicket& other) const {
    return worker_id == other.worker_id && table == other.table && clock == other.clock &&
           fingerprint == other.fingerprint && runs == other.runs;
  }
};

}  // namespace ps

#endif  // PS_CLIENT_PUSH_TICKET_H_
