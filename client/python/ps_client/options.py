"""The client's options and the small types of its API."""

import collections
import dataclasses
import enum

from proto import coordinator_pb2

from . import errors
from . import security

ROLES = {"client": coordinator_pb2.CLIENT, "worker": coordinator_pb2.WORKER}


class DenseUpdate(enum.Enum):
    """How push_dense's values are used."""
    ASSIGN = "assign"      # the values replace the tensor (the dense master copy)
    GRADIENT = "gradient"  # gradients, applied with the job's dense optimizer on the servers


PushResult = collections.namedtuple("PushResult", ["duplicate_keys", "late_keys"])
PushResult.__doc__ = """What the servers said of a push: keys whose shard had already applied the
request (a retry after a lost reply: not applied again), and keys dropped as late (sync mode,
a straggler's push to a step applied without it)."""


@dataclasses.dataclass
class ClientOptions:
    """How to connect; the fields and defaults of the C++ ps::ClientOptions."""
    # host:port of the coordinator, or several comma-separated ("a:1,b:2,c:3"): the job's
    # coordinators, of which the client follows the leader (ps_client/coordinator.py). Required.
    coordinator: str
    # Seconds connect() waits for the coordinator and a complete shard map.
    connect_timeout: float = 60.0
    # gRPC channels (TCP connections) to each server; requests are spread over them. >= 1.
    channels_per_server: int = 2
    # Upper bound on the keys of one request. >= 1.
    max_keys_per_request: int = 32768
    # Largest request or response in bytes; 0 takes the job's cluster.max_message_bytes.
    max_message_bytes: int = 0
    # Seconds a call keeps retrying retryable errors before it raises the last one.
    retry_timeout: float = 60.0
    # Deadline of one request to a server, in seconds.
    request_timeout: float = 60.0
    # How this client registers: "client", or "worker" with `rank` (-1: any).
    role: str = "client"
    rank: int = -1
    # gRPC client interceptors wrapped around every server channel (tracing, fault injection).
    interceptors: tuple = ()
    # TLS and bearer tokens (ps_client/security.py; deploy/README.md), paths as the daemons'
    # flags of the same names; "" = not given. tls_ca: the CA of the servers' certificates (the
    # client then dials with TLS). tls_cert/tls_key (both or neither): this client's certificate,
    # for clusters that require client certificates. token_file: lines "ROLE TOKEN"; every call
    # carries its worker token (its admin token if it has none). A token file needs tls_ca.
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    token_file: str = ""

    def validate(self):
        """InvalidArgumentError naming the first bad field; for the TLS and token files, the
        errors of security.Security.load (FailedPreconditionError for a token file without
        tls_ca, an error naming the option and the file for one that cannot be read or
        parsed). Returns the loaded security.Security."""
        def bad(what):
            raise errors.InvalidArgumentError("ClientOptions.%s" % what)
        if not isinstance(self.coordinator, str) or not self.coordinator:
            bad("coordinator must be a non-empty host:port, or several comma-separated")
        if self.channels_per_server < 1 or self.max_keys_per_request < 1:
            bad("channels_per_server and max_keys_per_request must be >= 1")
        if self.max_message_bytes < 0:
            bad("max_message_bytes must be >= 0")
        for name in ("connect_timeout", "retry_timeout", "request_timeout"):
            if not getattr(self, name) > 0:
                bad("%s must be > 0 seconds" % name)
        if self.role not in ROLES:
            bad("role must be one of %s, got %r" % (sorted(ROLES), self.role))
        if self.rank < -1:
            bad("rank must be >= -1")
        for name in ("tls_ca", "tls_cert", "tls_key", "token_file"):
            if not isinstance(getattr(self, name), str):
                bad("%s must be a path (str), \"\" for none" % name)
        return security.Security.load(self)
