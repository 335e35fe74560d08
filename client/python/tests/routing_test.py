"""Hashing, planning and the wire format of the Python client, against the pinned vectors of
common/hash_test.cc, python3-xxhash, and the C++ client's own planning (cpp_peer plan)."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))

import cluster_case  # noqa: E402
from ps_client import routing, wire  # noqa: E402
from proto import ps_pb2  # noqa: E402


class HashTest(unittest.TestCase):

    def test_pinned_vectors(self):
        # common/hash_test.cc "hash values are pinned": the on-wire and on-disk contract.
        self.assertEqual(routing.name_hash(""), 0x2d06800538d394c2)
        user = routing.name_hash("user")
        self.assertEqual(user, 0x99e389d25c10af32)
        ids = np.array([0, 1, 42, 0xffffffffffffffff, 1234567890123], dtype=np.uint64)
        self.assertEqual(routing.key_hashes(user, ids).tolist(),
                         [0x0e0d26d4d1ab87af, 0x3bdb682a6fa2b5cc, 0xc9f8bb4ca24dddb5,
                          0x87a3633a7538f147, 0x5f5340b4fecfabf4])
        self.assertEqual(routing.shards_of(user, ids[:3], 64).tolist(), [3, 14, 50])
        self.assertEqual(routing.shards_of(user, np.array([42, 1234567890123], np.uint64),
                                           7).tolist(), [5, 2])

    def test_numpy_xxh3_matches_python3_xxhash(self):
        rng = np.random.default_rng(1)
        ids = np.concatenate([rng.integers(0, 2**64, size=200000, dtype=np.uint64),
                              np.arange(1000, dtype=np.uint64),
                              np.array([2**32 - 1, 2**32, 2**63, 2**64 - 1], np.uint64)])
        for name in ["", "user", "item", "émbédding/表", "x" * 300]:
            h = routing.name_hash(name)
            np.testing.assert_array_equal(routing.key_hashes(h, ids),
                                          routing.key_hashes_reference(h, ids), err_msg=name)

    def test_shard_is_high_bits_of_the_product(self):
        rng = np.random.default_rng(2)
        hashes = np.concatenate([rng.integers(0, 2**64, size=2000, dtype=np.uint64),
                                 np.array([0, 1, 2**64 - 1, 2**63], np.uint64)])
        for n in [1, 2, 7, 64, 1000, 65536, 2**31 + 11, 2**32 - 1]:
            expected = [(int(h) * n) >> 64 for h in hashes.tolist()]
            self.assertEqual(routing.shards_of_hashes(hashes, n).tolist(), expected, n)
        with self.assertRaises(ValueError):
            routing.shards_of_hashes(hashes, 0)


class PlanTest(unittest.TestCase):

    def check_like_cpp(self, table, keys, shard_to_server, max_keys):
        plan = routing.plan_keys(keys, routing.name_hash(table), np.array(shard_to_server),
                                 max_keys)
        cpp_parts, cpp_unique = cluster_case.cpp_plan(table, keys, shard_to_server, max_keys)
        parts = [(p.server, [(shard, count) for shard, _, count in p.segments])
                 for p in plan.parts]
        self.assertEqual(parts, cpp_parts)
        np.testing.assert_array_equal(plan.unique, cpp_unique)
        # Every key finds its row, segments are contiguous, parts respect the limit.
        np.testing.assert_array_equal(plan.unique[plan.index], keys)
        at = 0
        for p in plan.parts:
            self.assertLessEqual(p.num_keys, max_keys)
            for _, begin, count in p.segments:
                self.assertEqual(begin, at)
                at += count
        self.assertEqual(at, len(plan.unique))
        return plan

    def test_plans_like_the_cpp_client(self):
        rng = np.random.default_rng(3)
        cases = [
            ("user", rng.integers(0, 2**64, size=5000, dtype=np.uint64), [0, 1] * 8, 32768),
            ("user", rng.integers(0, 500, size=5000).astype(np.uint64), [0, 1] * 8, 100),
            ("item", rng.integers(0, 2**64, size=20000, dtype=np.uint64),
             rng.integers(0, 3, size=64).tolist(), 777),
            ("t", np.array([5, 5, 5, 9], np.uint64), [2], 1),
            ("t", np.array([42], np.uint64), [0, 1], 5),
            ("t", np.full(1000, 3, np.uint64), [0, 1], 5),
            ("t", (rng.zipf(1.3, size=30000) % 3000).astype(np.uint64), [1, 0, 2, 0, 1] * 5, 64),
        ]
        for table, keys, shard_to_server, max_keys in cases:
            with self.subTest(table=table, n=len(keys), max_keys=max_keys):
                self.check_like_cpp(table, keys, shard_to_server, max_keys)

    def test_empty_call(self):
        plan = routing.plan_keys(np.empty(0, np.uint64), 1, np.zeros(4, np.int64), 10)
        self.assertEqual(plan.parts, [])
        self.assertEqual(len(plan.unique), 0)

    def test_repeated_gradients_sum_in_call_order(self):
        # One addition after another from zero, as the C++ client sums (np.add.at is sequential).
        rng = np.random.default_rng(4)
        keys = np.concatenate([rng.integers(0, 300, size=20000),
                               np.full(5000, 7), np.full(200, 1000)]).astype(np.uint64)
        rng.shuffle(keys)
        grads = rng.standard_normal((len(keys), 5)).astype(np.float32)
        plan = routing.plan_keys(keys, routing.name_hash("g"), np.array([0, 1, 0]), 1000)
        expected = np.zeros((len(plan.unique), 5), np.float32)
        np.add.at(expected, plan.index, grads)
        np.testing.assert_array_equal(routing.sum_gradients(plan, grads), expected)

    def test_reroute_keeps_segments_whole(self):
        part = routing.Part(0)
        part.segments = [(0, 0, 5), (1, 5, 3), (2, 8, 4), (3, 12, 1)]
        part.num_keys = 13
        parts = routing.reroute(part, np.array([1, 2, 1, 2]))
        self.assertEqual([(p.server, p.segments, p.num_keys) for p in parts],
                         [(1, [(0, 0, 5), (2, 8, 4)], 9), (2, [(1, 5, 3), (3, 12, 1)], 4)])

    def test_dense_routes(self):
        h = routing.name_hash("mlp")
        shard_to_server = np.array([0, 1, 2, 0, 1, 2, 0])
        routes = routing.route_dense(h, 10 * 100 + 1, 100, 2, shard_to_server)
        chunks = sorted(c for _, cs in routes for c in cs)
        self.assertEqual(chunks, list(range(11)))
        for server, cs in routes:
            self.assertLessEqual(len(cs), 2)
            for c in cs:
                shard = routing.shards_of(h, np.array([c], np.uint64), 7)[0]
                self.assertEqual(shard_to_server[shard], server)


class WireTest(unittest.TestCase):

    def test_sparse_request_parses_as_protobuf(self):
        header = ps_pb2.RequestHeader(map_version=3, worker_id=7, sequence=99, clock=-1)
        fields = wire.sparse_fields(header, "emb", [(4, 0, 2), (9, 2, 1)])
        keys = np.array([1, 2**64 - 1, 5], np.uint64)
        grads = np.arange(6, dtype=np.float32).reshape(3, 2)
        request = ps_pb2.PushRequest.FromString(
            wire.encode_sparse_request(fields, [keys[:2], keys[2:]], [grads[:2], grads[2:]]))
        self.assertEqual(request.header, header)
        self.assertEqual(request.table, "emb")
        self.assertEqual([(r.shard, r.count) for r in request.runs], [(4, 2), (9, 1)])
        self.assertEqual(request.keys, keys.astype("<u8").tobytes())
        self.assertEqual(request.grads, grads.tobytes())
        pull = ps_pb2.PullRequest.FromString(wire.encode_sparse_request(fields, keys))
        self.assertEqual(pull.keys, keys.tobytes())
        self.assertEqual(pull.table, "emb")

    def test_pull_response_read_in_place(self):
        values = np.linspace(-1, 1, 12, dtype=np.float32)
        data = ps_pb2.PullResponse(values=values.tobytes(), dim=4).SerializeToString()
        got, dim = wire.decode_pull_response(data)
        self.assertEqual(dim, 4)
        np.testing.assert_array_equal(got, values)
        empty, dim = wire.decode_pull_response(b"")
        self.assertEqual((len(empty), dim), (0, 0))
        # Unknown fields of every wire type are skipped.
        extra = (b"\x18\x05" + b"\x21" + b"\0" * 8 + b"\x2d" + b"\0" * 4 +
                 b"\x32\x02ab")
        got, dim = wire.decode_pull_response(extra + data)
        np.testing.assert_array_equal(got, values)
        for bad in [b"\x0a\x10abc", b"\x0a\x03abc", b"\x80", b"\x00\x01", b"\x0f"]:
            with self.assertRaises(ValueError, msg=bad):
                wire.decode_pull_response(bad)


if __name__ == "__main__":
    unittest.main()
