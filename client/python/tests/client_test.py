"""The Python client against a real cluster (ps_coordinator and ps_server processes on loopback):
values both ways with the C++ client, bit for bit; the header fields; dense tensors; errors; a
lost reply; threads; heartbeats; a server killed; sync steps; several coordinators, of which the
client follows the leader."""

import os
import socket
import sys
import threading
import time
import unittest

from concurrent import futures

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))

import cluster_case  # noqa: E402
import ps_client  # noqa: E402
from ps_client import routing  # noqa: E402
from proto import coordinator_pb2, ps_pb2, ps_pb2_grpc  # noqa: E402

JOB = """
name: "python_client"
tables {
  name: "adagrad"
  dim: 16
  initializer { kind: NORMAL stddev: 0.05 }
  optimizer { type: "adagrad" learning_rate: 0.05 initial_accumulator: 0.1 }
}
tables {
  name: "sgd"
  dim: 3
  initializer { kind: ZEROS }
  optimizer { type: "sgd" learning_rate: 1 }
}
training { seed: 11 mode: ASYNC dense_optimizer { type: "sgd" learning_rate: 0.5 } }
cluster { num_shards: 16 num_servers: 2 max_message_bytes: 1048576 dense_chunk_floats: 1000 }
"""

PUSH = "/ps.rpc.ParameterServer/Push"
PULL = "/ps.rpc.ParameterServer/Pull"


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


class ClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.cluster = cluster_case.start_cluster(JOB)
        cls.client = ps_client.connect(cls.cluster.address, connect_timeout=30)
        cls.cpp = cluster_case.CppPeer(cls.cluster.address)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()

    def keys(self, seed, n, low, high):
        rng = np.random.default_rng(seed)
        return rng.integers(low, high, size=n, dtype=np.uint64), rng

    def test_cpp_writes_python_reads(self):
        keys, rng = self.keys(1, 3000, 0, 2000)  # repeats
        keys[::7] |= np.uint64(1 << 63)
        grads = rng.standard_normal((len(keys), 16)).astype(np.float32)
        self.cpp.push("adagrad", keys, grads)
        self.cpp.push("adagrad", keys[:500], grads[:500] * 2)
        mine = self.client.pull("adagrad", keys)
        self.assertEqual(mine.shape, (len(keys), 16))
        self.assertEqual(mine.dtype, np.float32)
        np.testing.assert_array_equal(bits(mine), bits(self.cpp.pull("adagrad", keys, 16)))
        self.assertFalse(np.array_equal(mine, self.client.pull("adagrad", keys + 10**6)))

    def test_python_writes_cpp_reads(self):
        keys, rng = self.keys(2, 3000, 10**7, 10**7 + 2000)
        grads = rng.standard_normal((len(keys), 16)).astype(np.float32)
        before = self.client.pull("adagrad", keys)
        self.assertEqual(self.client.push("adagrad", keys, grads), (0, 0))
        after = self.client.pull("adagrad", keys)
        self.assertTrue(np.all(np.any(after != before, axis=1)))
        np.testing.assert_array_equal(bits(after), bits(self.cpp.pull("adagrad", keys, 16)))

    def test_repeated_keys_are_summed_as_the_cpp_client_sums(self):
        # The same pushes, with repeats, through each client on its own keys of a ZEROS table at
        # rate 1: each row is minus its sum, so equal bits mean equal sums.
        keys, rng = self.keys(3, 20000, 0, 300)
        keys[:3000] = 7  # a key repeated thousands of times
        grads = rng.standard_normal((len(keys), 3)).astype(np.float32)
        offset = np.uint64(10**9)
        self.cpp.push("sgd", keys, grads)
        self.client.push("sgd", keys + offset, grads)
        unique = np.unique(keys)
        np.testing.assert_array_equal(bits(self.client.pull("sgd", unique + offset)),
                                      bits(self.client.pull("sgd", unique)))
        expected = np.zeros((len(unique), 3), np.float32)
        np.add.at(expected, np.searchsorted(unique, keys), grads)
        np.testing.assert_allclose(self.client.pull("sgd", unique), -expected, rtol=1e-5,
                                   atol=1e-4)

    def test_header_fields_and_runs(self):
        recorder = cluster_case.Recorder()
        with ps_client.connect(self.cluster.address, interceptors=(recorder,),
                               max_keys_per_request=500) as client:
            self.assertNotEqual(client.worker_id, self.client.worker_id)
            client.set_clock(5)
            keys, rng = self.keys(4, 3000, 2 * 10**9, 3 * 10**9)
            client.push("sgd", keys, rng.standard_normal((3000, 3)).astype(np.float32))
            client.pull("sgd", keys)
            shard_to_server = np.array([a.primary for a in client.shard_map.shards])
            h = routing.name_hash("sgd")
            for method, message, last_sequence in ((PUSH, ps_pb2.PushRequest, 0),
                                                   (PULL, ps_pb2.PullRequest, None)):
                requests = [message.FromString(r) for _, r, _ in recorder.of(method)]
                self.assertGreaterEqual(len(requests), 6)  # 3000 keys, 500 a request
                self.assertEqual(sum(len(r.keys) // 8 for r in requests), 3000)
                sequences = sorted(r.header.sequence for r in requests)
                for r in requests:
                    self.assertEqual(r.header.worker_id, client.worker_id)
                    self.assertEqual(r.header.map_version, client.shard_map.version)
                    self.assertEqual(r.header.clock, 5)
                    self.assertEqual(r.table, "sgd")
                    keys_of = np.frombuffer(r.keys, dtype="<u8")
                    self.assertLessEqual(len(keys_of), 500)
                    runs = [s for run in r.runs for s in [run.shard] * run.count]
                    self.assertEqual(routing.shards_of(h, keys_of, 16).tolist(), runs)
                    self.assertEqual(len(set(shard_to_server[runs])), 1)  # one server each
                    if method == PUSH:
                        self.assertEqual(len(r.grads), len(keys_of) * 3 * 4)
                if last_sequence is None:
                    self.assertEqual(set(sequences), {0})  # pulls carry none
                else:
                    self.assertEqual(sequences, list(range(1, len(requests) + 1)))

    def test_a_push_whose_reply_was_lost_is_applied_once(self):
        recorder = cluster_case.Recorder()
        with ps_client.connect(self.cluster.address, interceptors=(recorder,)) as client:
            keys = np.arange(3 * 10**9, 3 * 10**9 + 400, dtype=np.uint64)
            grads = np.ones((400, 3), np.float32)
            recorder.lose_replies[PUSH] = 1
            result = client.push("sgd", keys, grads)
            pushes = [ps_pb2.PushRequest.FromString(r) for _, r, _ in recorder.of(PUSH)]
            # Two requests (one per server), the first sent again with its sequence.
            self.assertEqual(len(pushes), 3)
            self.assertEqual(pushes[0].header.sequence, pushes[2].header.sequence)
            self.assertEqual(pushes[0].keys, pushes[2].keys)
            self.assertEqual(result.duplicate_keys, len(pushes[0].keys) // 8)
            np.testing.assert_array_equal(client.pull("sgd", keys), -grads)

    def test_the_same_push_sent_twice_moves_the_rows_once(self):
        # As a client whose reply was lost: the same PushRequest, same (worker_id, sequence).
        with ps_client.connect(self.cluster.address) as other:
            current = other.shard_map
            h = routing.name_hash("sgd")
            candidates = np.arange(4 * 10**9, 4 * 10**9 + 2000, dtype=np.uint64)
            shards = routing.shards_of(h, candidates, current.num_shards)
            keys = candidates[shards == 5][:50]
            grads = np.full((len(keys), 3), 0.25, np.float32)
            request = ps_pb2.PushRequest(
                header=ps_pb2.RequestHeader(map_version=current.version,
                                            worker_id=other.worker_id, sequence=1, clock=-1),
                table="sgd", keys=keys.tobytes(), grads=grads.tobytes(),
                runs=[ps_pb2.ShardRun(shard=5, count=len(keys))])
            server = {s.server_id: s.address for s in current.servers}[current.shards[5].primary]
            with grpc.insecure_channel(server) as channel:
                stub = ps_pb2_grpc.ParameterServerStub(channel)
                self.assertEqual(stub.Push(request, timeout=30).duplicate_keys, 0)
                self.assertEqual(stub.Push(request, timeout=30).duplicate_keys, len(keys))
            np.testing.assert_array_equal(self.client.pull("sgd", keys), -grads)

    def test_dense_tensors_both_ways(self):
        rng = np.random.default_rng(6)
        values = rng.standard_normal(2500).astype(np.float32)  # 3 chunks of 1000
        self.client.push_dense("py_dense", values.reshape(50, 50))
        np.testing.assert_array_equal(bits(self.cpp.pull_dense("py_dense", 2500)), bits(values))
        np.testing.assert_array_equal(bits(self.client.pull_dense("py_dense", 2500)), bits(values))
        self.cpp.push_dense("cpp_dense", values[:1500] * 3)
        np.testing.assert_array_equal(bits(self.client.pull_dense("cpp_dense", 1500)),
                                      bits(values[:1500] * 3))
        grads = rng.standard_normal(2500).astype(np.float32)
        self.client.push_dense("py_dense", grads, kind="gradient")
        after = self.client.pull_dense("py_dense", 2500)
        np.testing.assert_allclose(after, values - np.float32(0.5) * grads, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(bits(self.cpp.pull_dense("py_dense", 2500)), bits(after))
        with self.assertRaises(ps_client.NotFoundError):
            self.client.pull_dense("never_pushed", 10)
        with self.assertRaises(ps_client.InvalidArgumentError) as e:
            self.client.pull_dense("py_dense", 2000)
        self.assertIn("2500", str(e.exception))
        with self.assertRaises(ps_client.InvalidArgumentError):
            self.client.push_dense("py_dense", np.ones(7, np.float32))  # the tensor has 2500

    def test_bad_input_gets_a_clear_error(self):
        c = self.client
        ok_keys = np.array([1, 2], np.uint64)
        cases = [
            (ps_client.NotFoundError, "unknown table", lambda: c.pull("nope", ok_keys)),
            (ps_client.NotFoundError, "unknown table", lambda: c.dim("nope")),
            (ValueError, "1-D", lambda: c.pull("sgd", np.ones((2, 2), np.uint64))),
            (ValueError, "integers", lambda: c.pull("sgd", np.array([1.5, 2.0]))),
            (ValueError, "non-negative", lambda: c.pull("sgd", np.array([3, -1]))),
            (ValueError, "shape", lambda: c.push("sgd", ok_keys, np.ones((2, 4), np.float32))),
            (ValueError, "shape", lambda: c.push("sgd", ok_keys, np.ones(6, np.float32))),
            (ValueError, "NaN or Inf",
             lambda: c.push("sgd", ok_keys, np.array([[1, 2, np.nan], [0, 0, 0]], np.float32))),
            (ValueError, "NaN or Inf",
             lambda: c.push("sgd", ok_keys, np.array([[1, 2, np.inf], [0, 0, 0]]))),
            (ValueError, "real numbers", lambda: c.push("sgd", ok_keys, [["a"] * 3] * 2)),
            (ValueError, "positive integer", lambda: c.pull_dense("py_dense", 0)),
            (ValueError, "kind", lambda: c.push_dense("x", np.ones(3), kind="sum")),
            (ValueError, "without a name", lambda: c.push_dense("", np.ones(3))),
            (ValueError, "NaN or Inf", lambda: c.push_dense("x", np.array([np.nan]))),
            (ValueError, "ClientOptions.coordinator", lambda: ps_client.connect("")),
            (ValueError, "ClientOptions.role",
             lambda: ps_client.connect(self.cluster.address, role="boss")),
            (ps_client.UnavailableError, "not reachable",
             lambda: ps_client.connect("127.0.0.1:1", connect_timeout=0.5)),
        ]
        for error, text, call in cases:
            with self.subTest(text=text):
                with self.assertRaises(error) as e:
                    call()
                self.assertIsInstance(e.exception, ps_client.PsError)
                self.assertIn(text, str(e.exception))
        # Nothing of the refused push was applied.
        np.testing.assert_array_equal(c.pull("sgd", ok_keys), np.zeros((2, 3), np.float32))
        self.assertEqual(c.pull("sgd", np.array([], np.uint64)).shape, (0, 3))
        self.assertEqual(c.push("sgd", [], np.zeros((0, 3))), (0, 0))

    def test_threads_share_a_client(self):
        errors = []

        def work(t):
            try:
                rng = np.random.default_rng(100 + t)
                keys = (np.uint64(5 * 10**9 + 10**6 * t) +
                        rng.integers(0, 500, size=2000).astype(np.uint64))
                for _ in range(10):
                    self.client.push("sgd", keys, np.ones((2000, 3), np.float32))
                    self.client.pull("sgd", keys)
                unique, counts = np.unique(keys, return_counts=True)
                np.testing.assert_array_equal(self.client.pull("sgd", unique)[:, 0],
                                              -10.0 * counts)
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])

    def test_heartbeats_keep_the_client_a_live_member(self):
        def member(client):
            status = ps_client.coordinator.CoordinatorConnection(
                self.cluster.address, 10).status()
            return {m.member_id: m for m in status.members}[client.worker_id]

        client = ps_client.connect(self.cluster.address, role="client")
        with client:
            # Without heartbeats it would not have been heard of for 2 s, since it registered;
            # they come every 500 ms (the coordinator's default).
            time.sleep(2.0)
            m = member(client)
            self.assertEqual(m.role, coordinator_pb2.CLIENT)
            self.assertTrue(m.alive)
            self.assertLess(m.last_seen_ms, 1500)
        # The default dead_after_ms is 3000.
        cluster_case.wait_until(lambda: not member(client).alive, 20, "the closed client dead")
        with self.assertRaises(ps_client.FailedPreconditionError):
            client.pull("sgd", np.array([1], np.uint64))


FAILOVER_JOB = """
name: "python_failover"
tables { name: "t" dim: 4 initializer { kind: UNIFORM } optimizer { type: "sgd" learning_rate: 1 } }
training { mode: ASYNC }
cluster { num_shards: 8 num_servers: 2 replication_factor: 2 replication_mode: SYNC }
"""


class FailoverTest(unittest.TestCase):

    def test_follows_the_map_when_a_server_dies_and_returns(self):
        with cluster_case.start_cluster(FAILOVER_JOB) as cluster:
            options = dict(retry_timeout=30, request_timeout=5)
            recorder = cluster_case.Recorder()
            client = ps_client.connect(cluster.address, **options)
            # A client that does not follow the map by itself: its heartbeats are stopped.
            stale = ps_client.connect(cluster.address, interceptors=(recorder,), **options)
            stale._coordinator.stop_heartbeats()
            with client, stale:
                keys = np.arange(1000, dtype=np.uint64)
                grads = np.random.default_rng(7).standard_normal((1000, 4)).astype(np.float32)
                client.push("t", keys, grads)
                before = client.pull("t", keys)
                version = client.shard_map.version
                self.assertEqual(stale.shard_map.version, version)
                self.assertEqual({a.primary for a in client.shard_map.shards}, {0, 1})
                port = cluster.servers[0].port
                cluster.servers[0].kill()
                # Unavailable server 0: reported, failed over, the client follows.
                np.testing.assert_array_equal(client.pull("t", keys), before)
                client.push("t", keys, grads)
                np.testing.assert_array_equal(client.pull("t", keys), before - grads)
                self.assertGreater(client.shard_map.version, version)
                self.assertEqual({a.primary for a in client.shard_map.shards}, {1})
                # Server 0 returns at its address and becomes a replica of every shard.
                cluster.add_server(["--listen=127.0.0.1:%d" % port])
                coordinator = ps_client.coordinator.CoordinatorConnection(cluster.address, 10)

                def healed():
                    shards = coordinator.status().shard_map.shards
                    return all(len(a.replicas) == 1 and not a.catching_up for a in shards)
                cluster_case.wait_until(healed, 30, "every shard with 2 copies")
                coordinator.close()
                # The stale client's requests for server 0's old shards reach a replica, which
                # refuses them (FAILED_PRECONDITION); it refreshes its map and goes to server 1.
                self.assertEqual(stale.shard_map.version, version)
                stale.push("t", keys, grads)
                self.assertIn((PUSH, grpc.StatusCode.FAILED_PRECONDITION), recorder.failures)
                self.assertGreater(stale.shard_map.version, version)
                np.testing.assert_array_equal(stale.pull("t", keys), before - grads - grads)


SYNC_JOB = """
name: "python_sync"
tables { name: "t" dim: 2 initializer { kind: ZEROS } optimizer { type: "sgd" learning_rate: 1 } }
training { mode: SYNC }
cluster { num_shards: 4 num_servers: 2 num_workers: 1 }
"""


class SyncStepsTest(unittest.TestCase):

    def test_a_step_is_applied_at_its_end(self):
        with cluster_case.start_cluster(SYNC_JOB) as cluster:
            with ps_client.connect(cluster.address, role="worker", rank=0) as client:
                self.assertEqual(client.rank, 0)
                keys = np.array([1, 2, 3, 1], np.uint64)
                for step in range(3):
                    client.set_clock(step)
                    rows = client.pull("t", keys)
                    np.testing.assert_array_equal(rows[:, 0], -step * np.array([2, 1, 1, 2]))
                    client.push("t", keys, np.ones((4, 2), np.float32))
                    # Pulls of this step see the steps before it only.
                    np.testing.assert_array_equal(client.pull("t", keys), rows)
                    self.assertEqual(client.end_step(step), step)
                client.set_clock(3)
                np.testing.assert_array_equal(client.pull("t", keys)[:, 1], [-6, -3, -3, -6])


def refusing_port():
    """A bound socket that does not listen (connections to it are refused) and its address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock, "127.0.0.1:%d" % sock.getsockname()[1]


class _Standby(grpc.GenericRpcHandler):
    """Answers every call UNAVAILABLE as a standby coordinator does, naming ``leader`` if any."""

    def __init__(self, address, leader):
        self.message = "coordinator %s is a standby" % address
        if leader:
            self.message += "; the leader is " + leader
        self.calls = 0

    def service(self, handler_call_details):
        self.calls += 1

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAVAILABLE, self.message)
        return grpc.unary_unary_rpc_method_handler(refuse)


def start_standby(leader):
    """A gRPC server on loopback whose every method answers as a standby; (server, handler,
    address)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    port = server.add_insecure_port("127.0.0.1:0")
    address = "127.0.0.1:%d" % port
    handler = _Standby(address, leader)
    server.add_generic_rpc_handlers((handler,))
    server.start()
    return server, handler, address


class _Recording(grpc.GenericRpcHandler):
    """A coordinator that answers heartbeats OK and counts them."""

    def __init__(self):
        self.heartbeats = 0

    def service(self, handler_call_details):
        if handler_call_details.method != "/ps.rpc.Coordinator/Heartbeat":
            return None

        def heartbeat(request, context):
            self.heartbeats += 1
            return coordinator_pb2.HeartbeatResponse()
        return grpc.unary_unary_rpc_method_handler(
            heartbeat, request_deserializer=coordinator_pb2.HeartbeatRequest.FromString,
            response_serializer=coordinator_pb2.HeartbeatResponse.SerializeToString)


def start_recording():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    port = server.add_insecure_port("127.0.0.1:0")
    handler = _Recording()
    server.add_generic_rpc_handlers((handler,))
    server.start()
    return server, handler, "127.0.0.1:%d" % port


class SeveralCoordinatorsTest(unittest.TestCase):
    """A list of coordinators: calls and heartbeats reach the leader whatever the order."""

    def test_a_bad_list_names_the_entry(self):
        parse = ps_client.coordinator.parse_addresses
        self.assertEqual(parse("a:1,[::1]:2"), ["a:1", "[::1]:2"])
        for bad, named in [("", "empty entry 1"), ("a:1,,b:2", "empty entry 2"),
                           ("a:1,b", "'b'"), ("a:1,b:0", "'b:0'"), ("a:1, b:2", "' b:2'"),
                           ("a:1,a:1", "listed twice")]:
            with self.assertRaises(ps_client.InvalidArgumentError) as raised:
                ps_client.coordinator.CoordinatorConnection(bad, 1)
            self.assertIn(named, str(raised.exception))
        self.assertEqual(ps_client.coordinator.leader_named_in(
            "coordinator h:1 is a standby; the leader is h:2"), "h:2")
        self.assertEqual(ps_client.coordinator.leader_named_in("coordinator h:1 is a standby"), "")

    def test_nothing_reachable_names_the_list(self):
        first, dead = refusing_port()
        second, also_dead = refusing_port()
        with first, second:
            with self.assertRaises(ps_client.UnavailableError) as raised:
                ps_client.coordinator.CoordinatorConnection(dead + "," + also_dead, 0.3)
            self.assertIn(dead + "," + also_dead, str(raised.exception))

    def test_a_client_given_a_dead_coordinator_and_standbys_reaches_the_leader(self):
        dead_socket, dead = refusing_port()
        with dead_socket, cluster_case.start_cluster(JOB) as cluster:
            leader = cluster.address
            named_server, named, named_address = start_standby(leader)
            blind_server, blind, blind_address = start_standby("")
            try:
                for order in ([dead, blind_address, named_address, leader],
                              [named_address, dead, leader, blind_address],
                              [blind_address, leader, dead, named_address]):
                    with ps_client.connect(",".join(order), connect_timeout=30) as client:
                        self.assertEqual(client._coordinator.address, leader)
                        refused = named.calls + blind.calls
                        keys = np.arange(10, dtype=np.uint64)
                        client.push("sgd", keys, np.ones((10, 3), np.float32))
                        self.assertEqual(client.pull("sgd", keys).shape, (10, 3))
                        self.assertEqual(client._coordinator.status().job_name, "python_client")
                        cluster_case.wait_until(
                            lambda: client._coordinator.last_heartbeat_error is None, 10,
                            "a heartbeat answered")
                        # Once the leader answered, calls go there first.
                        self.assertEqual(named.calls + blind.calls, refused)
                # The C++ client, through cpp_peer, follows too.
                peer = cluster_case.CppPeer(",".join([named_address, dead, leader]))
                keys = np.arange(5, dtype=np.uint64)
                with ps_client.connect(leader) as direct:
                    np.testing.assert_array_equal(peer.pull("sgd", keys, 3),
                                                  direct.pull("sgd", keys))
            finally:
                named_server.stop(None)
                blind_server.stop(None)

    def test_heartbeats_follow_a_new_leader_within_the_interval(self):
        a_server, a, a_address = start_recording()
        b_server, b, b_address = start_recording()
        conn = ps_client.coordinator.CoordinatorConnection(a_address + "," + b_address, 10)
        # The first connection up becomes the current one: A, unless B's came up first (a busy
        # machine). Whichever it is stops; the heartbeats must reach the other.
        servers = {a_address: (a_server, a), b_address: (b_server, b)}
        first = conn.address
        other = b_address if first == a_address else a_address
        try:
            self.assertIn(first, servers)
            # An hour apart: only a heartbeat that moves on within its interval reaches the other.
            conn.start_heartbeats(7, 3600)
            cluster_case.wait_until(lambda: servers[first][1].heartbeats == 1, 10,
                                    "a heartbeat to the first")
            servers[first][0].stop(None).wait()
            conn.heartbeat_soon()
            cluster_case.wait_until(lambda: servers[other][1].heartbeats == 1, 10,
                                    "a heartbeat to the other")
            self.assertEqual(conn.address, other)
            self.assertEqual(servers[first][1].heartbeats, 1)
        finally:
            conn.close()
            a_server.stop(None)
            b_server.stop(None)

if __name__ == "__main__":
    unittest.main()
