"""A push whose part for one server cannot get through (that server stopped with SIGSTOP, past
the client's retry_timeout) fails after its other parts were applied; once the server runs again,
retry_push with the error's push_ticket applies every part exactly once. A plain push of the same
keys is a new push, applied again. Real ps_coordinator and ps_server processes on loopback (the
C++ twin: tests/push_retry_test.cc)."""

import os
import signal
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))

import cluster_case  # noqa: E402
import ps_client  # noqa: E402
from ps_client import routing  # noqa: E402

JOB = """
name: "python_push_retry"
tables {
  name: "sgd"
  dim: 4
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "sgd" learning_rate: 0.5 }
}
training { seed: 3 mode: ASYNC }
cluster { num_shards: 16 num_servers: 2 max_message_bytes: 1048576 dense_chunk_floats: 1000 }
"""
LEARNING_RATE = np.float32(0.5)


class PushRetryTest(unittest.TestCase):

    def setUp(self):
        # A stopped server is never declared dead here: its shards stay where they are.
        self.cluster = cluster_case.start_cluster(JOB, coordinator_args=["--dead_after_ms=600000"])
        self.addCleanup(self.cluster.stop)
        self.client = ps_client.connect(self.cluster.address, connect_timeout=30,
                                        max_keys_per_request=64, request_timeout=0.3,
                                        retry_timeout=1.0)
        self.addCleanup(self.client.close)

    def assert_applied(self, init, grads, got, times):
        expected = init.copy()
        for _ in range(times):
            expected -= LEARNING_RATE * grads
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)

    def test_failed_push_made_again_with_its_ticket_applies_every_part_once(self):
        client = self.client
        rng = np.random.default_rng(20261127)
        keys = rng.integers(0, 2**63, size=1000, dtype=np.uint64)
        grads = rng.uniform(-1, 1, size=(1000, 4)).astype(np.float32)
        stopped = self.cluster.servers[1]
        current = client._current()
        stopped_id = next(s.server_id for s in client.shard_map.servers
                          if s.address == stopped.address)
        shards = routing.shards_of(routing.name_hash("sgd"), keys, len(current.shard_to_server))
        live = current.shard_to_server[shards] != stopped_id
        self.assertTrue(0 < live.sum() < len(keys))
        init = client.pull("sgd", keys)

        os.kill(stopped.process.pid, signal.SIGSTOP)
        resumed = [False]

        def resume():
            if not resumed[0]:
                os.kill(stopped.process.pid, signal.SIGCONT)
                resumed[0] = True
        self.addCleanup(resume)
        with self.assertRaises(ps_client.PsError) as failed:
            client.push("sgd", keys, grads)
        self.assertIn(failed.exception.code.name, ("DEADLINE_EXCEEDED", "UNAVAILABLE"))
        ticket = failed.exception.push_ticket
        self.assertIsInstance(ticket, ps_client.PushTicket)
        self.assertEqual(ticket.worker_id, client.worker_id)
        self.assertEqual(ticket.table, "sgd")
        self.assertGreater(len(ticket.runs), 2)
        # The live server applied its part.
        self.assert_applied(init[live], grads[live], client.pull("sgd", keys[live]), 1)

        # Refused, nothing sent: other gradients, another client's ticket.
        other = grads.copy()
        other[1, 1] += 1
        with self.assertRaises(ps_client.InvalidArgumentError):
            client.retry_push(ticket, "sgd", keys, other)
        foreign = ps_client.PushTicket(ticket.worker_id + 1000, ticket.table, ticket.clock,
                                       ticket.fingerprint, ticket.runs)
        with self.assertRaisesRegex(ps_client.InvalidArgumentError, "worker"):
            client.retry_push(foreign, "sgd", keys, grads)

        resume()
        result = client.retry_push(ticket, "sgd", keys, grads)
        self.assertGreater(result.duplicate_keys, 0)  # the live server's part, applied before
        self.assert_applied(init, grads, client.pull("sgd", keys), 1)

        # Again with the same ticket: every part a duplicate, nothing changes.
        self.assertEqual(client.retry_push(ticket, "sgd", keys, grads).duplicate_keys, len(keys))
        self.assert_applied(init, grads, client.pull("sgd", keys), 1)

        # A plain push is a new push: applied a second time.
        client.push("sgd", keys, grads)
        self.assert_applied(init, grads, client.pull("sgd", keys), 2)

        # Past the servers' window the ticket is refused, naming the limit; nothing applied.
        for _ in range(1030):
            client.push("sgd", keys[:1], np.zeros((1, 4), dtype=np.float32))
        with self.assertRaisesRegex(ps_client.InvalidArgumentError, "1024"):
            client.retry_push(ticket, "sgd", keys, grads)
        self.assert_applied(init, grads, client.pull("sgd", keys), 2)

    def test_a_push_refused_before_sending_has_no_ticket(self):
        with self.assertRaises(ps_client.InvalidArgumentError) as refused:
            self.client.push("sgd", [1, 2], [[0, 0, 0, np.nan], [0, 0, 0, 0]])
        self.assertIsNone(refused.exception.push_ticket)


if __name__ == "__main__":
    unittest.main()
