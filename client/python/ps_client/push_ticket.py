"""The identity of one push (the C++ client's ps::PushTicket, client/push_ticket.h): which
sequence numbers (proto/ps.proto rule 5) carried which of its keys, so that a push that failed
after some servers applied their parts can be made again with Client.retry_push, each part applied
exactly once.

A push that fails after its requests were numbered raises a PsError whose ``push_ticket`` is one;
one refused before (unknown table, bad shapes, a NaN or Inf gradient) has ``push_ticket`` None,
and nothing of it was applied.
"""

import dataclasses

import numpy as np
import xxhash

# How far below a worker's newest sequence a shard still tells whether it applied one (rule 5).
WINDOW = 1024


@dataclasses.dataclass(frozen=True)
class PushTicket:
    """worker_id: the client that made the push (only it may make it again); table; clock: the
    step the push carried; fingerprint: of its keys and gradients (fingerprint()); runs: tuples
    (sequence, shard, offset, count), by ascending sequence: ``count`` of the push's distinct keys
    of ``shard``, from the ``offset``-th on in the order they first appear, went in the request
    numbered ``sequence``."""
    worker_id: int
    table: str
    clock: int
    fingerprint: int
    runs: tuple

    @property
    def first_sequence(self):
        return self.runs[0][0] if self.runs else 0

    @property
    def last_sequence(self):
        return self.runs[-1][0] if self.runs else 0


def fingerprint(keys, grads):
    """XXH3-64 of the keys' bytes (uint64 little-endian), then of the gradients' (float32, row
    major) seeded with the first: the C++ PushTicket::Fingerprint of the same arrays."""
    first = xxhash.xxh3_64_intdigest(np.ascontiguousarray(keys, dtype="<u8").tobytes())
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(grads, dtype="<f4").tobytes(), seed=first)


def ticket_of(worker_id, table, clock, keys, grads, parts, first_sequence):
    """The ticket of a push whose planned ``parts`` (routing.Part, in plan order) were numbered
    from ``first_sequence``."""
    first_of_shard = {}
    for part in parts:
        for shard, begin, _ in part.segments:
            first_of_shard[shard] = min(begin, first_of_shard.get(shard, begin))
    runs = tuple((first_sequence + i, shard, begin - first_of_shard[shard], count)
                 for i, part in enumerate(parts) for shard, begin, count in part.segments)
    return PushTicket(worker_id, table, clock, fingerprint(keys, grads), runs)
