// The width of the exactly-once window of pushes (proto/ps.proto rule 5): a shard remembers,
// per worker, which of the kSequenceWindow sequences below the highest it admitted it applied
// (server/storage/apply_window.h), so a request may be retried, or a failed Push made again
// (client/push_ticket.h), only while it is within that many of the worker's newest. Part of the
// wire contract: the servers and every client (client/python/ps_client/push_ticket.py's WINDOW
// too) must agree on it.
#ifndef PS_COMMON_SEQUENCE_WINDOW_H_
#define PS_COMMON_SEQUENCE_WINDOW_H_

#include <cstdint>

namespace ps {

inline constexpr uint64_t kSequenceWindow = 1024;

}  // namespace ps

#endif  // PS_COMMON_SEQUENCE_WINDOW_H_
