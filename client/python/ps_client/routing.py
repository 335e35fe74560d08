"""Key-to-shard hashing and the planning of a sparse call, as the C++ client does them.

The hash is the wire contract of proto/ps.proto and common/hash.h: a table's name hash is
XXH3-64 of its UTF-8 name; a key's hash is XXH3-64 of the id's 8 little-endian bytes seeded with
the name hash; its shard is the high 64 bits of ``key_hash * num_shards``.

``key_hashes`` computes XXH3-64 of 8-byte inputs with NumPy, for a whole array at once: the
specification's path for inputs of 4 to 8 bytes (XXH3_len_4to8_64b) is a few 64-bit operations.
It is several times faster than calling python3-xxhash once per key (client/python/README.md,
"Rates", has the rates), and is checked against python3-xxhash (``key_hashes_reference``) when
this module is imported and by the tests.

``plan_keys`` mirrors client/internal/key_router.cc: keys deduplicated, grouped by server, then
shard (shards in (server, shard) order, keys of a shard in the order they first appear), cut into
parts of at most ``max_keys_per_part`` keys of one server, each part a list of runs (segments).
"""

import struct

import numpy as np
import xxhash

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
# Bytes 8..23 of XXH3's default secret (kSecret), read as two little-endian 64-bit words.
_SECRET_8, _SECRET_16 = struct.unpack(
    "<QQ", bytes([0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
                  0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb]))
_PRIME_MX2 = _U64(0x9FB21C651E98DF25)


def name_hash(name):
    """XXH3-64 of a table's or dense tensor's name (str, UTF-8) as a Python int."""
    return xxhash.xxh3_64_intdigest(name.encode("utf-8"))


def key_hashes(name_hash_value, ids):
    """XXH3-64 of each id's 8 little-endian bytes seeded with ``name_hash_value``.

    ``ids`` is a 1-D uint64 array; returns a new uint64 array of the same length.
    """
    seed = name_hash_value & _MASK64
    # XXH3_len_4to8_64b: seed ^= swap32(low 32 bits of seed) << 32.
    swapped = int.from_bytes((seed & 0xFFFFFFFF).to_bytes(4, "little"), "big")
    seed ^= swapped << 32
    bitflip = _U64(((_SECRET_8 ^ _SECRET_16) - seed) & _MASK64)
    ids = np.asarray(ids, dtype=_U64)
    # input64 = input2 + (input1 << 32) with input1 the low and input2 the high 32 bits of the id:
    # the id rotated by 32 bits.
    h = ids << _U64(32)
    h |= ids >> _U64(32)
    h ^= bitflip
    # rrmxmx(h, len = 8).
    t = h << _U64(49)
    t |= h >> _U64(15)
    u = h << _U64(24)
    u |= h >> _U64(40)
    t ^= u
    h ^= t
    h *= _PRIME_MX2
    np.right_shift(h, _U64(35), out=t)
    t += _U64(8)
    h ^= t
    h *= _PRIME_MX2
    np.right_shift(h, _U64(28), out=t)
    h ^= t
    return h


def key_hashes_reference(name_hash_value, ids):
    """``key_hashes`` computed with python3-xxhash, one key at a time (slow; for checks)."""
    data = np.ascontiguousarray(ids, dtype="<u8").tobytes()
    seed = name_hash_value & _MASK64
    digest = xxhash.xxh3_64_intdigest
    return np.fromiter((digest(data[i:i + 8], seed) for i in range(0, len(data), 8)),
                       dtype=_U64, count=len(data) // 8)


def shards_of_hashes(hashes, num_shards):
    """The shard of each key hash: the high 64 bits of hash * num_shards, as uint32.

    ValueError unless 1 <= num_shards < 2^32."""
    if not 1 <= num_shards < (1 << 32):
        raise ValueError("num_shards must be in [1, 2^32), got %r" % (num_shards,))
    n = _U64(num_shards)
    # hash * n = hi * n * 2^32 + lo * n with hi, lo the 32-bit halves; neither product nor the sum
    # below overflows 64 bits for n < 2^32.
    high = (hashes >> _U64(32)) * n
    high += ((hashes & _U64(0xFFFFFFFF)) * n) >> _U64(32)
    high >>= _U64(32)
    return high.astype(np.uint32)


def shards_of(name_hash_value, ids, num_shards):
    """The shard of each id of the table whose name hash is ``name_hash_value``."""
    return shards_of_hashes(key_hashes(name_hash_value, ids), num_shards)


class Part:
    """The keys of one request to one server: runs (shard, begin, count) of the plan's keys."""

    __slots__ = ("server", "segments", "num_keys")

    def __init__(self, server):
        self.server = server
        self.segments = []  # (shard, begin, count): plan.unique[begin:begin + count] of one shard
        self.num_keys = 0

    def __repr__(self):
        return "Part(server=%d, segments=%r)" % (self.server, self.segments)


class Plan:
    """A planned sparse call.

    unique: the distinct keys, grouped by server, then shard (uint64 array).
    index: for each position of the call's keys, the index of its key in ``unique``.
    order: the call's positions grouped by shard (stable): ``keys[order]`` is ``unique`` when the
      keys do not repeat.
    has_repeats: whether some key occurs more than once.
    parts: the requests, each a ``Part``.
    """

    __slots__ = ("unique", "index", "order", "has_repeats", "parts")


def _add_segment(parts, server, shard, begin, count, max_keys):
    # client/internal/key_router.cc AddSegment: a new part at a server change or when full.
    while count > 0:
        if not parts or parts[-1].server != server or parts[-1].num_keys >= max_keys:
            parts.append(Part(server))
        part = parts[-1]
        take = min(count, max_keys - part.num_keys)
        part.segments.append((shard, begin, take))
        part.num_keys += take
        begin += take
        count -= take


def _dedupe(keys):
    """(first, unique_of) of a non-empty key array: ``first`` the positions where each distinct
    key first appears, ascending (``keys[first]`` are the distinct keys in order of appearance),
    ``unique_of[p]`` the index in ``first`` of the key at position p; (None, None) when no key
    repeats. A sort, as np.unique, but an unstable one: the first positions come from a
    minimum over each run of equal keys."""
    n = len(keys)
    perm = np.argsort(keys)
    ordered = keys[perm]
    starts_run = np.empty(n, dtype=bool)
    starts_run[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_run[1:])
    run_of = np.cumsum(starts_run) - 1  # by sorted position, its run of equal keys
    if run_of[-1] + 1 == n:
        return None, None
    run_first = np.minimum.reduceat(perm, np.flatnonzero(starts_run))
    by_first = np.argsort(run_first)
    position = np.empty(len(run_first), dtype=np.intp)
    position[by_first] = np.arange(len(run_first))
    unique_of = np.empty(n, dtype=np.intp)
    unique_of[perm] = position[run_of]
    return run_first[by_first], unique_of


def plan_keys(keys, name_hash_value, shard_to_server, max_keys_per_part):
    """Plans a call on ``keys`` (1-D uint64) of the table whose name hash is ``name_hash_value``.

    ``shard_to_server[s]`` is the server of shard s (its length is the number of shards). Each
    part holds at most ``max_keys_per_part`` (>= 1) keys, all of one server.
    """
    shard_to_server = np.asarray(shard_to_server, dtype=np.int64)
    num_shards = len(shard_to_server)
    if max_keys_per_part < 1:
        raise ValueError("max_keys_per_part must be >= 1")
    n = len(keys)
    plan = Plan()
    plan.parts = []
    if n == 0:
        plan.unique = np.empty(0, dtype=_U64)
        plan.index = np.empty(0, dtype=np.intp)
        plan.order = np.empty(0, dtype=np.intp)
        plan.has_repeats = False
        return plan
    # Shards in (server, shard) order, so that every server's keys end up contiguous.
    shard_order = np.argsort(shard_to_server, kind="stable")
    rank_of_shard = np.empty(num_shards, dtype=np.uint16 if num_shards <= 65536 else np.uint32)
    rank_of_shard[shard_order] = np.arange(num_shards)
    ranks = rank_of_shard[shards_of(name_hash_value, keys, num_shards)]
    # A stable sort by rank (a radix sort for 16-bit ranks) keeps each shard's keys in call order.
    order = np.argsort(ranks, kind="stable")
    sorted_keys = keys[order]
    sorted_ranks = ranks[order]
    first, unique_of = _dedupe(sorted_keys)
    plan.index = np.empty(n, dtype=np.intp)
    plan.has_repeats = first is not None
    if plan.has_repeats:
        plan.unique = sorted_keys[first]
        plan.index[order] = unique_of
        unique_ranks = sorted_ranks[first]
    else:
        plan.unique = sorted_keys
        plan.index[order] = np.arange(n)
        unique_ranks = sorted_ranks
    plan.order = order
    counts = np.bincount(unique_ranks, minlength=num_shards)
    begin = 0
    for rank in np.flatnonzero(counts).tolist():
        shard = int(shard_order[rank])
        count = int(counts[rank])
        _add_segment(plan.parts, int(shard_to_server[shard]), shard, begin, count,
                     max_keys_per_part)
        begin += count
    return plan


def sum_gradients(plan, grads):
    """The gradients of ``plan.unique`` in plan order, those of a repeated key summed in float32.

    ``grads`` is (len(keys), dim) float32 in call order. Sums are taken in the order the C++
    client takes them (each key's gradients in call order), so both give the same bits.
    """
    if not plan.has_repeats:
        return gather_rows(grads, plan.order)
    # NumPy's reductions (add.reduceat, add.reduce over a contiguous axis) sum pairwise, which
    # gives other bits than one addition after another; add.at is sequential but slow. So: the
    # k-th gradient of every key at once, k = 0, 1, ... (each round's keys distinct), for keys
    # that repeat up to _HEAVY times, and a running sum (add.accumulate) for each heavier key.
    num_unique = len(plan.unique)
    counts = np.bincount(plan.index, minlength=num_unique)
    by_key = np.argsort(plan.index, kind="stable")  # positions grouped by key, in call order
    starts = np.zeros(num_unique, dtype=np.intp)
    np.cumsum(counts[:-1], out=starts[1:])
    sums = np.zeros((num_unique, grads.shape[1]), dtype=np.float32)
    keys = np.flatnonzero(counts <= _HEAVY)
    key_starts = starts[keys]
    key_counts = counts[keys]
    k = 0
    while len(keys):
        sums[keys] += gather_rows(grads, by_key[key_starts + k])
        k += 1
        more = key_counts > k
        keys, key_starts, key_counts = keys[more], key_starts[more], key_counts[more]
    zero = np.zeros((1, grads.shape[1]), dtype=np.float32)
    for key in np.flatnonzero(counts > _HEAVY).tolist():
        rows = grads[by_key[starts[key]:starts[key] + counts[key]]]
        sums[key] = np.add.accumulate(np.concatenate([zero, rows]), axis=0)[-1]
    return sums


# Keys repeated more often than this are summed one by one (sum_gradients).
_HEAVY = 64


def gather_rows(rows, index):
    """``rows[index]`` for a C-contiguous 2-D array: each row moved as one item, which NumPy
    does about twice as fast as fancy indexing of a 2-D array."""
    rows = np.ascontiguousarray(rows)
    items = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()
    return np.take(items, index).view(rows.dtype).reshape(len(index), rows.shape[1])


def reroute(part, shard_to_server):
    """Regroups the segments of ``part`` (planned with an older map) by their servers in
    ``shard_to_server``, keeping each segment whole (client_internal::Reroute)."""
    parts = {}
    for segment in part.segments:
        server = int(shard_to_server[segment[0]])
        new = parts.get(server)
        if new is None:
            new = parts[server] = Part(server)
        new.segments.append(segment)
        new.num_keys += segment[2]
    return list(parts.values())


def route_dense(name_hash_value, total_floats, chunk_floats, chunks_per_request,
                shard_to_server):
    """The requests of a dense tensor of ``total_floats`` floats: [(server, [chunk, ...]), ...].

    Chunk c holds floats [c * chunk_floats, (c + 1) * chunk_floats) and lives on the shard of
    (name, c); each server's chunks go in requests of at most ``chunks_per_request``.
    """
    num_chunks = -(-total_floats // chunk_floats)
    shards = shards_of(name_hash_value, np.arange(num_chunks, dtype=_U64), len(shard_to_server))
    servers = np.asarray(shard_to_server, dtype=np.int64)[shards].tolist()
    routes = []
    open_route = {}  # server -> index of its unfilled route
    for chunk, server in enumerate(servers):
        at = open_route.get(server)
        if at is None or len(routes[at][1]) >= chunks_per_request:
            routes.append((server, []))
            at = open_route[server] = len(routes) - 1
        routes[at][1].append(chunk)
    return routes


def _self_check():
    ids = np.array([0, 1, 42, 0xFFFFFFFFFFFFFFFF, 1234567890123, 0x0123456789ABCDEF],
                   dtype=_U64)
    for name in ("", "user", "emb"):
        h = name_hash(name)
        if not np.array_equal(key_hashes(h, ids), key_hashes_reference(h, ids)):
            raise ImportError("ps_client.routing: the NumPy XXH3 disagrees with python3-xxhash")


_self_check()
