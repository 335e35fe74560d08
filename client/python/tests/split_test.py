"""Pull and push of 1M distinct keys under a 1 MiB message limit: every request and response
stays under it, and the rows agree bit for bit with the C++ client's."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))

import cluster_case  # noqa: E402
import ps_client  # noqa: E402
from proto import ps_pb2  # noqa: E402

LIMIT = 1 << 20  # the smallest max_message_bytes a job may have
DIM = 8
JOB = """
name: "python_split"
tables {
  name: "big"
  dim: %d
  initializer { kind: UNIFORM low: -0.5 high: 0.5 }
  optimizer { type: "sgd" learning_rate: 1 }
  capacity_hint: 1100000
}
training { seed: 5 mode: ASYNC }
cluster { num_shards: 64 num_servers: 2 max_message_bytes: %d }
""" % (DIM, LIMIT)
N = 1 << 20


class SplitTest(unittest.TestCase):

    def test_a_million_keys_split_under_the_limit(self):
        rng = np.random.default_rng(11)
        keys = np.unique(rng.integers(0, 2**64, size=N + 1000, dtype=np.uint64))[:N]
        rng.shuffle(keys)
        self.assertEqual(len(keys), N)
        recorder = cluster_case.Recorder()
        with cluster_case.start_cluster(JOB) as cluster:
            with ps_client.connect(cluster.address, connect_timeout=30,
                                   interceptors=(recorder,)) as client:
                rows = client.pull("big", keys)
                self.check_calls(recorder, "/Pull", ps_pb2.PullRequest)
                cpp = cluster_case.CppPeer(cluster.address)
                np.testing.assert_array_equal(rows.view(np.uint32),
                                              cpp.pull("big", keys, DIM).view(np.uint32))
                recorder.clear()
                grads = rng.uniform(-1, 1, size=(N, DIM)).astype(np.float32)
                self.assertEqual(client.push("big", keys, grads), (0, 0))
                self.check_calls(recorder, "/Push", ps_pb2.PushRequest)
                after = client.pull("big", keys)
                # sgd at rate 1: w - g, one rounding, as NumPy rounds it.
                np.testing.assert_array_equal(after, rows - grads)
                np.testing.assert_array_equal(after.view(np.uint32),
                                              cpp.pull("big", keys, DIM).view(np.uint32))

    def check_calls(self, recorder, method, message):
        calls = recorder.of(method)
        # 1M keys of 8 + 32 bytes need at least 40 requests of 1 MiB.
        self.assertGreaterEqual(len(calls), N * (8 + 4 * DIM) // LIMIT)
        total = 0
        for _, request, response in calls:
            self.assertLessEqual(len(request), LIMIT)
            self.assertLessEqual(len(response), LIMIT)
            total += len(message.FromString(request).keys) // 8
        self.assertEqual(total, N)


if __name__ == "__main__":
    unittest.main()
