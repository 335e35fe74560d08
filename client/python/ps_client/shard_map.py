"""A shard map ready for routing, and the channels to the servers it names."""

import itertools

import grpc
import numpy as np

from proto import ps_pb2_grpc

from . import errors
from . import security as security_lib

PULL_METHOD = "/ps.rpc.ParameterServer/Pull"
PUSH_METHOD = "/ps.rpc.ParameterServer/Push"


class ServerConnection:
    """The gRPC channels to one server (several TCP connections; requests are spread over them).

    Pull and Push go through callables that send and receive raw bytes (ps_client.wire); the
    other methods through the generated stub. Thread-safe.
    """

    def __init__(self, address, channels, interceptors=(), security=None):
        """``security``: a security.Security (None: plaintext)."""
        self.address = address
        security = security or security_lib.Security()
        self._channels = []
        self._pull = []
        self._push = []
        self._stubs = []
        for i in range(channels):
            channel = security.channel(address, [
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1),
                # A connection of its own per channel, not one shared subchannel.
                ("grpc.use_local_subchannel_pool", 1),
                ("ps.channel_index", i),
            ])
            self._channels.append(channel)
            if interceptors:
                channel = grpc.intercept_channel(channel, *interceptors)
            self._pull.append(channel.unary_unary(PULL_METHOD))
            self._push.append(channel.unary_unary(PUSH_METHOD))
            self._stubs.append(ps_pb2_grpc.ParameterServerStub(channel))
        self._turn = itertools.count()

    def pull(self):
        """A callable sending serialised PullRequests (bytes) and returning bytes."""
        return self._pull[next(self._turn) % len(self._pull)]

    def push(self):
        """A callable sending serialised PushRequests (bytes) and returning bytes."""
        return self._push[next(self._turn) % len(self._push)]

    def stub(self):
        """A ps_pb2_grpc.ParameterServerStub."""
        return self._stubs[next(self._turn) % len(self._stubs)]

    def close(self):
        for channel in self._channels:
            channel.close()


class Routing:
    """A shard map ready for routing. Immutable once built; replaced whole on refresh.

    version: the map's version. map: the coordinator_pb2.ShardMap.
    shard_to_server: by shard, its primary's server_id (int64 array).
    readers: with cluster.read_from_replicas, by shard the servers a pull may go to (the primary,
      then the live replicas); else None.
    lost: by shard, whether it lost every copy (bool array).
    servers: server_id -> ServerConnection of every server of the map.
    alive: the server_ids the map says are alive.
    """

    def __init__(self, shard_map, read_from_replicas, connect):
        """Builds the routing of ``shard_map``; ``connect(address)`` gives a ServerConnection.

        InternalError for an incomplete map or one naming an unknown server.
        """
        num_shards = shard_map.num_shards
        if num_shards == 0 or len(shard_map.shards) != num_shards:
            raise errors.InternalError("coordinator sent an incomplete shard map (version %d)" %
                                       shard_map.version)
        self.version = shard_map.version
        self.map = shard_map
        self.shard_to_server = np.zeros(num_shards, dtype=np.int64)
        self.lost = np.zeros(num_shards, dtype=bool)
        self.readers = [None] * num_shards if read_from_replicas else None
        for a in shard_map.shards:
            if a.shard >= num_shards:
                raise errors.InternalError("shard %d out of range in map" % a.shard)
            self.shard_to_server[a.shard] = a.primary
            self.lost[a.shard] = a.lost
            if self.readers is not None:
                self.readers[a.shard] = [a.primary] + list(a.replicas)
        self.servers = {s.server_id: connect(s.address) for s in shard_map.servers}
        self.alive = {s.server_id for s in shard_map.servers if s.alive}
        for server in set(self.shard_to_server.tolist()):
            if server not in self.servers:
                raise errors.InternalError("shard map names unknown server %d" % server)

    def pull_owners(self, turn):
        """By shard, the server a pull goes to: with read_from_replicas one of its live copies,
        a different one for each ``turn``; else its primary."""
        if self.readers is None:
            return self.shard_to_server
        return np.array([copies[(turn + s) % len(copies)]
                         for s, copies in enumerate(self.readers)], dtype=np.int64)
