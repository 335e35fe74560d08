"""A push whose header.worker_id the coordinator never issued is refused with PERMISSION_DENIED
(proto/ps.proto: a push's worker id comes from Register), and nothing of it is applied.

Written against a raw stub; the server asks the coordinator (Coordinator.GetMemberIds) about an
id it does not know yet (server/registered_workers.h)."""

import os
import sys
import unittest

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))

import cluster_case  # noqa: E402
import ps_client  # noqa: E402
from ps_client import routing  # noqa: E402
from proto import ps_pb2, ps_pb2_grpc  # noqa: E402

JOB = """
name: "python_unregistered"
tables { name: "t" dim: 2 initializer { kind: ZEROS } optimizer { type: "sgd" learning_rate: 1 } }
training { mode: ASYNC }
cluster { num_shards: 4 num_servers: 1 }
"""
UNREGISTERED = 4000000000


class UnregisteredWorkerTest(unittest.TestCase):

    def push(self, client, worker_id, keys):
        current = client.shard_map
        shard = 0
        request = ps_pb2.PushRequest(
            header=ps_pb2.RequestHeader(map_version=current.version, worker_id=worker_id,
                                        sequence=1, clock=-1),
            table="t", keys=keys.tobytes(), grads=np.ones((len(keys), 2), np.float32).tobytes(),
            runs=[ps_pb2.ShardRun(shard=shard, count=len(keys))])
        with grpc.insecure_channel(current.servers[0].address) as channel:
            return ps_pb2_grpc.ParameterServerStub(channel).Push(request, timeout=30)

    def test_a_worker_id_never_issued_is_refused(self):
        with cluster_case.start_cluster(JOB) as cluster:
            with ps_client.connect(cluster.address) as client:
                candidates = np.arange(1, 200, dtype=np.uint64)
                keys = candidates[routing.shards_of(routing.name_hash("t"), candidates, 4) == 0]
                with self.assertRaises(grpc.RpcError) as e:
                    self.push(client, UNREGISTERED, keys)
                self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED,
                                 e.exception.details())
                np.testing.assert_array_equal(client.pull("t", keys), 0)
                # The id Register gave is accepted.
                self.assertEqual(self.push(client, client.worker_id, keys).duplicate_keys, 0)
                np.testing.assert_array_equal(client.pull("t", keys), -1)


if __name__ == "__main__":
    unittest.main()
