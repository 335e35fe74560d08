"""The Python client of the parameter server (the C++ client's twin, client/ps_client.h).

    import numpy as np
    import ps_client

    with ps_client.connect("10.0.0.1:7000") as client:       # registers, fetches the shard map
        keys = np.array([3, 7, 3], dtype=np.uint64)
        rows = client.pull("user", keys)                      # float32, shape (3, dim)
        client.push("user", keys, grads)                      # summed per key, applied once

A call dedupes its keys, groups them by shard and server, splits each server's part into
requests under the message limit, sends them to all servers in parallel, and retries what failed
for a retryable reason (a server unavailable, a stale shard map) with the same sequence numbers,
so a retried push is never applied twice.
"""

import threading
import time

import grpc
import numpy as np

from proto import job_pb2
from proto import ps_pb2

from . import errors
from . import inputs
from . import push_ticket
from . import routing
from . import wire
from .coordinator import CoordinatorConnection
from .options import ROLES, ClientOptions, DenseUpdate, PushResult
from .shard_map import Routing, ServerConnection

# Room for the header, table name and runs of a request beyond keys and values.
REQUEST_OVERHEAD_BYTES = 64 << 10
_RETRYABLE = frozenset([grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.FAILED_PRECONDITION,  # a stale map: retried after refresh
                        grpc.StatusCode.DEADLINE_EXCEEDED])


def connect(coordinator, **options):
    """Connects to the coordinator at ``coordinator`` (host:port, or several comma-separated: the
    job's coordinators, of which the client follows the leader), registers, starts the
    heartbeat thread and waits for a complete shard map. ``options``: fields of ClientOptions.

    Raises InvalidArgumentError for bad options (a bad coordinator list names the entry), UnavailableError if the coordinator cannot be
    reached or the map is not ready within connect_timeout, the coordinator's error if it refuses
    the registration. Returns a Client; close it (or use it as a context manager).
    """
    opts = ClientOptions(coordinator=coordinator, **options)
    security = opts.validate()
    conn = CoordinatorConnection(opts.coordinator, opts.connect_timeout, security)
    client = None
    try:
        registration = conn.register(ROLES[opts.role], opts.rank)
        client = Client(opts, conn, registration, security)
        conn.start_heartbeats(registration.member_id,
                              max(registration.heartbeat_interval_ms, 1) / 1000.0,
                              client._on_map_version)
        client._install(conn.get_shard_map(1, opts.connect_timeout))
        return client
    except BaseException:
        if client is not None:
            client.close()
        else:
            conn.close()
        raise


class _Table:
    __slots__ = ("name", "dim", "name_hash")

    def __init__(self, name, dim):
        self.name = name
        self.dim = dim
        self.name_hash = routing.name_hash(name)


class _Request:
    """One request of a sparse call; kept whole across retries (same sequence number)."""
    __slots__ = ("part", "sequence", "routed_version")

    def __init__(self, part, sequence):
        self.part = part
        self.sequence = sequence
        self.routed_version = 0


class Client:
    """One connection to a parameter-server cluster. Thread-safe: any number of threads may call
    it at once. Made by connect(); close() it, or use it in a ``with`` block."""

    def __init__(self, options, coordinator, registration, security=None):
        self._options = options
        self._security = security  # the servers' channels' credentials (None: plaintext)
        self._coordinator = coordinator
        self.job = registration.job  # the job the cluster runs (a job_pb2.Job)
        self.worker_id = registration.member_id  # the id this client's pushes carry
        self.rank = registration.rank  # the rank the coordinator gave (workers), or -1
        # Sync jobs restored from a checkpoint: the first step to train; else 0.
        self.start_step = registration.start_step
        self._max_message_bytes = (options.max_message_bytes or
                                   self.job.cluster.max_message_bytes)
        self._tables = {t.name: _Table(t.name, t.dim) for t in self.job.tables}
        self._lock = threading.Lock()
        self._next_sequence = 1
        self._next_read = 0
        self._clock = -1
        self._routing = None
        self._connections = {}  # address -> ServerConnection, reused across maps
        self._closed = False

    # ---- the public API ----

    def dim(self, table):
        """The dim of ``table``; NotFoundError for an unknown table."""
        return self._table(table).dim

    @property
    def shard_map(self):
        """The shard map (coordinator_pb2.ShardMap) this client routes with."""
        return self._current().map

    def set_clock(self, step):
        """Sets the step clock requests carry (the step a push belongs to, the step a pull
        serves); -1 (the default) when the caller keeps no clock."""
        self._clock = int(step)

    def pull(self, table, keys):
        """The rows of ``keys`` (1-D uint64 array; keys may repeat) as a new float32 array of
        shape (len(keys), dim), in the order of ``keys``. Rows never pushed come from the
        table's initializer.

        NotFoundError for an unknown table; InvalidArgumentError for keys that are not a 1-D
        array of non-negative integers; UnavailableError (or another server error) once
        retry_timeout has passed.
        """
        info = self._table(table)
        keys = inputs.as_keys(keys)
        self._check_open()
        if len(keys) == 0:
            return np.empty((0, info.dim), dtype=np.float32)
        current = self._current()
        with self._lock:
            turn = self._next_read
            self._next_read += 1
        plan = routing.plan_keys(keys, info.name_hash, current.pull_owners(turn),
                                 self._max_keys_per_request(info.dim))
        rows = np.empty((len(plan.unique), info.dim), dtype=np.float32)
        requests = [_Request(part, 0) for part in plan.parts]
        self._sparse_call(info, plan, requests, current, rows=rows)
        return routing.gather_rows(rows, plan.index)

    def push(self, table, keys, grads):
        """Applies ``grads`` (float32, shape (len(keys), dim), in the order of ``keys``) with the
        table's optimizer; gradients of repeated keys are summed and applied once. Exactly once,
        also across the client's own retries. Returns a PushResult.

        NotFoundError for an unknown table; InvalidArgumentError for shapes that disagree, keys
        that are not non-negative integers, or a NaN or Inf gradient (nothing applied, and the
        error's push_ticket is None); errors of servers as pull. A push goes to each server in
        requests of its own: when it fails after they were sent, some servers' parts may have
        been applied, and the error's ``push_ticket`` names it. Pushing again is a new push
        (the applied parts are applied twice); retry_push with the ticket applies each part once.
        """
        info = self._table(table)
        keys = inputs.as_keys(keys)
        grads = inputs.as_grads(grads, len(keys), info)
        self._check_open()
        if len(keys) == 0:
            return PushResult(0, 0)
        current = self._current()
        clock = self._clock
        plan = routing.plan_keys(keys, info.name_hash, current.shard_to_server,
                                 self._max_keys_per_request(info.dim))
        sums = routing.sum_gradients(plan, grads)
        first = self._take_sequences(len(plan.parts))
        requests = [_Request(part, first + i) for i, part in enumerate(plan.parts)]
        try:
            return self._sparse_call(info, plan, requests, current, grads=sums, clock=clock)
        except errors.PsError as e:
            e.push_ticket = push_ticket.ticket_of(self.worker_id, info.name, clock, keys, grads,
                                                  plan.parts, first)
            raise

    def retry_push(self, ticket, table, keys, grads):
        """Makes again the push (or retry_push) that ``ticket`` (a failed call's
        ``e.push_ticket``) names, with the same ``table``, ``keys`` and ``grads``: every part is
        resent with its original sequence numbers, to the servers owning its shards now, so that
        each shard applies its part exactly once (one that had applied it counts it in
        PushResult.duplicate_keys). Returns a PushResult; on failure raises as push, with the same
        ticket as the error's push_ticket, to be tried again.

        InvalidArgumentError, nothing sent: a ticket of another client (another worker_id: a
        ticket does not outlive the client that made it), another table, other keys or
        gradients, or a ticket too old: once this client has numbered more than 1024 requests
        after the ticket's first (a push takes one per request, push_dense one per chunk), a
        server can no longer tell whether it applied it (proto/ps.proto rule 5). A push of this
        client running at the same time may still push it past that window: the server then
        refuses that part (InvalidArgumentError "... more than 1024 below ..."), not applied.
        NotFoundError for an unknown table.
        """
        info = self._table(table)
        keys = inputs.as_keys(keys)
        grads = inputs.as_grads(grads, len(keys), info)
        self._check_open()
        self._check_ticket(ticket, table, keys, grads)
        current = self._current()
        plan = routing.plan_keys(keys, info.name_hash, current.shard_to_server,
                                 self._max_keys_per_request(info.dim))
        sums = routing.sum_gradients(plan, grads)
        # Each shard's distinct keys: where they start in plan.unique, and how many.
        first, count = {}, {}
        for part in plan.parts:
            for shard, begin, n in part.segments:
                first[shard] = min(begin, first.get(shard, begin))
                count[shard] = count.get(shard, 0) + n
        by_sequence, covered = {}, {}
        for sequence, shard, offset, n in ticket.runs:
            if n <= 0 or offset + n > count.get(shard, 0):
                raise self._other_keys(ticket, table)
            part = by_sequence.get(sequence)
            if part is None:
                part = by_sequence[sequence] = routing.Part(0)
            part.segments.append((shard, first[shard] + offset, n))
            part.num_keys += n
            covered[shard] = covered.get(shard, 0) + n
        if covered != count:
            raise self._other_keys(ticket, table)
        requests = [_Request(p, sequence) for sequence, part in sorted(by_sequence.items())
                    for p in routing.reroute(part, current.shard_to_server)]
        try:
            return self._sparse_call(info, plan, requests, current, grads=sums,
                                     clock=ticket.clock)
        except errors.PsError as e:
            e.push_ticket = ticket
            raise

    def pull_dense(self, name, size):
        """The dense tensor ``name`` of ``size`` (>= 1) floats, as a new float32 array.

        NotFoundError if it was never pushed; InvalidArgumentError if it does not have ``size``
        floats; errors of servers as pull.
        """
        size = inputs.as_size(size)
        self._check_open()
        chunk_floats = self.job.cluster.dense_chunk_floats
        out = np.empty(size, dtype=np.float32)

        def attempt(current):
            routes = self._route_dense(name, size, current)
            requests = []
            for server, chunks in routes:
                request = ps_pb2.PullDenseRequest(name=name, chunks=chunks)
                self._fill_header(current, request.header)
                requests.append((server, lambda stub: stub.PullDense, request))
            for response in self._send_all(current, requests, "PullDense"):
                wire.copy_dense_chunks(name, response, chunk_floats, out)
        self._retry_dense(attempt)
        return out

    def push_dense(self, name, values, kind=DenseUpdate.ASSIGN):
        """Assigns (``kind`` DenseUpdate.ASSIGN or "assign") or applies as gradients
        (DenseUpdate.GRADIENT or "gradient", with the job's dense optimizer) ``values`` to the
        dense tensor ``name``; any shape, taken flat in C order. The first push creates the
        tensor with that many floats. A retried gradient is applied once.

        InvalidArgumentError for an empty name or values, a size that disagrees with the
        tensor's, a NaN or Inf value, or an unknown kind; errors of servers as pull.
        """
        kind = inputs.as_dense_kind(kind)
        if not isinstance(name, str) or not name:
            raise errors.InvalidArgumentError("dense tensor without a name")
        values = inputs.as_floats(values, "values of dense tensor \"%s\"" % name).ravel()
        if values.size == 0:
            raise errors.InvalidArgumentError("dense tensor \"%s\" has no values" % name)
        if not np.isfinite(values).all():
            raise errors.InvalidArgumentError(
                "dense tensor \"%s\" has a NaN or Inf value; nothing was applied" % name)
        self._check_open()
        chunk_floats = self.job.cluster.dense_chunk_floats
        # Chunk c carries the sequence `sequence + c`, which its shard admits once.
        sequence = self._take_sequences(-(-values.size // chunk_floats))
        wire_kind = (ps_pb2.PushDenseRequest.ASSIGN if kind is DenseUpdate.ASSIGN
                     else ps_pb2.PushDenseRequest.GRADIENT)

        def attempt(current):
            requests = []
            for server, chunks in self._route_dense(name, values.size, current):
                request = ps_pb2.PushDenseRequest(name=name, total_floats=values.size,
                                                  kind=wire_kind)
                self._fill_header(current, request.header)
                request.header.sequence = sequence
                for c in chunks:
                    request.chunks.add(
                        chunk=c, values=values[c * chunk_floats:(c + 1) * chunk_floats].tobytes())
                requests.append((server, lambda stub: stub.PushDense, request))
            self._send_all(current, requests, "PushDense")
        self._retry_dense(attempt)

    def end_step(self, step):
        """Sync mode: tells every server that this worker pushed everything of ``step`` (call
        it after the step's pushes returned). Returns the newest step applied on any server:
        above ``step`` when the cluster went on without this worker, which should then continue
        at that step + 1. Other modes: does nothing and returns -1. Errors of servers as pull.
        """
        step = int(step)
        self._check_open()
        if self.job.training.mode != job_pb2.Training.SYNC:
            return -1

        def attempt(current):
            requests = []
            # A dead server's shards have moved to the others, which count its steps.
            for server in sorted(current.alive & set(current.servers)):
                request = ps_pb2.EndStepRequest()
                self._fill_header(current, request.header)
                request.header.clock = step
                requests.append((server, lambda stub: stub.EndStep, request))
            responses = self._send_all(current, requests, "EndStep")
            return max([r.applied_step for r in responses], default=-1)
        return self._retry_dense(attempt)

    def close(self):
        """Stops the heartbeats and closes every channel. Idempotent; calls after it raise
        FailedPreconditionError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections.values())
        self._coordinator.close()
        for conn in connections:
            conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- the shard map ----

    def _current(self):
        with self._lock:
            return self._routing

    def _connect(self, address):
        # Called under self._lock (from _install).
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = ServerConnection(
                address, self._options.channels_per_server, self._options.interceptors,
                self._security)
        return conn

    def _install(self, shard_map):
        with self._lock:
            if self._closed or (self._routing is not None and
                                self._routing.version >= shard_map.version):
                return
            self._routing = Routing(shard_map, self.job.cluster.read_from_replicas,
                                    self._connect)

    def _refresh_map(self, routed_version, timeout=0.2):
        """Fetches a map newer than ``routed_version`` if there is one; whether routing moved."""
        try:
            self._install(self._coordinator.get_shard_map(routed_version + 1, timeout))
        except errors.PsError:
            return False
        return self._current().version > routed_version

    def _on_map_version(self, version):
        # From the heartbeat thread: follow a newer map at once rather than at the next error.
        current = self._current()
        if current is not None and version > current.version and not self._closed:
            self._refresh_map(version - 1, timeout=1.0)

    # ---- sparse calls ----

    def _sparse_call(self, info, plan, requests, current, rows=None, grads=None, clock=None):
        """Sends ``requests`` and retries the retryable failures (client/ps_client.cc's Send,
        OnDone and EndRound). Pulls fill ``rows``; pushes send ``grads`` (both in plan order).
        ``clock``: the step the requests carry (None: the client's clock now)."""
        if clock is None:
            clock = self._clock
        deadline = time.monotonic() + self._options.retry_timeout
        backoff = 0.005
        duplicate = late = 0
        while True:
            sent = [(r, self._send_sparse(info, plan, r, current, clock, grads)) for r in requests]
            retry, error, last_retryable = [], None, None
            for request, call in sent:
                try:
                    if isinstance(call, errors.PsError):
                        raise call
                    answer = _result(call, "Pull" if grads is None else "Push",
                                     current.servers[request.part.server].address)
                    if grads is None:
                        wire.place_pull_rows(answer, request.part, info.dim, rows)
                    else:
                        response = ps_pb2.PushResponse.FromString(answer)
                        duplicate += response.duplicate_keys
                        late += response.late_keys
                except errors.PsError as e:
                    if e.code == grpc.StatusCode.UNAVAILABLE:
                        # Perhaps the server is gone: the coordinator checks at once.
                        self._coordinator.report_failure_async(
                            self.worker_id, request.part.server, e.message)
                    if e.code in _RETRYABLE:
                        retry.append(request)
                        last_retryable = e
                    elif error is None:
                        error = e
            if error is not None:
                raise error
            if not retry:
                return PushResult(duplicate, late)
            if time.monotonic() + backoff > deadline:
                raise last_retryable
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            changed = self._refresh_map(min(r.routed_version for r in retry))
            if not changed and last_retryable.code == grpc.StatusCode.FAILED_PRECONDITION:
                raise last_retryable  # the server refuses a shard and no newer map exists
            current = self._current()
            requests = [_Request(part, r.sequence)
                        for r in retry for part in routing.reroute(r.part, current.shard_to_server)]

    def _send_sparse(self, info, plan, request, current, clock, grads):
        """Starts one request; returns its grpc future, or the DataLossError of a lost shard."""
        request.routed_version = current.version
        part = request.part
        for shard, _, _ in part.segments:
            if current.lost[shard]:
                return errors.DataLossError(
                    "shard %d of table \"%s\" lost every copy (shard map version %d); its rows "
                    "come back only from a checkpoint" % (shard, info.name, current.version))
        header = ps_pb2.RequestHeader(map_version=current.version, worker_id=self.worker_id,
                                      sequence=request.sequence, clock=clock)
        fields = wire.sparse_fields(header, info.name, part.segments)
        keys = [plan.unique[b:b + c] for _, b, c in part.segments]
        conn = current.servers[part.server]
        timeout = self._options.request_timeout
        if grads is None:
            return conn.pull().future(wire.encode_sparse_request(fields, keys), timeout=timeout)
        body = [grads[b:b + c] for _, b, c in part.segments]
        return conn.push().future(wire.encode_sparse_request(fields, keys, body), timeout=timeout)

    def _max_keys_per_request(self, dim):
        per_key = 8 + 4 * dim
        limit = self._max_message_bytes
        room = limit - REQUEST_OVERHEAD_BYTES if limit > 2 * REQUEST_OVERHEAD_BYTES else limit // 2
        return min(max(1, room // per_key), self._options.max_keys_per_request)

    # ---- dense calls and EndStep ----

    def _route_dense(self, name, total_floats, current):
        chunk_floats = self.job.cluster.dense_chunk_floats
        per_request = max(1, (self._max_message_bytes // 2) // (chunk_floats * 4))
        return routing.route_dense(routing.name_hash(name), total_floats, chunk_floats,
                                   per_request, current.shard_to_server)

    def _send_all(self, current, requests, what):
        """Sends (server, method_of(stub), request) triples in parallel; their responses in
        order. Raises the first non-retryable error, else the first retryable one, after every
        request ended; UNAVAILABLE servers are reported to the coordinator."""
        timeout = self._options.request_timeout
        calls = [(server, method(current.servers[server].stub()).future(request, timeout=timeout))
                 for server, method, request in requests]
        responses, failures = [], []
        for server, call in calls:
            try:
                responses.append(_result(call, what, current.servers[server].address))
            except errors.PsError as e:
                if e.code == grpc.StatusCode.UNAVAILABLE:
                    self._coordinator.report_failure_async(self.worker_id, server, e.message)
                failures.append(e)
        for e in failures:
            if e.code not in _RETRYABLE:
                raise e
        if failures:
            raise failures[0]
        return responses

    def _retry_dense(self, attempt):
        """Runs ``attempt(routing)`` until it returns, fails for good, or retry_timeout passes."""
        deadline = time.monotonic() + self._options.retry_timeout
        backoff = 0.005
        while True:
            current = self._current()
            try:
                return attempt(current)
            except errors.PsError as e:
                if e.code not in _RETRYABLE or time.monotonic() + backoff > deadline:
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                changed = self._refresh_map(current.version)
                if not changed and e.code == grpc.StatusCode.FAILED_PRECONDITION:
                    raise

    # ---- small helpers ----

    def _table(self, name):
        info = self._tables.get(name)
        if info is None:
            raise errors.NotFoundError("unknown table \"%s\"" % (name,))
        return info

    def _check_ticket(self, ticket, table, keys, grads):
        """InvalidArgumentError unless ``ticket`` may be made again by this client as a push of
        ``keys`` and ``grads`` to ``table`` (retry_push)."""
        if not isinstance(ticket, push_ticket.PushTicket):
            raise errors.InvalidArgumentError("retry_push needs a PushTicket (a failed push's "
                                              "e.push_ticket), got %r" % (ticket,))
        if ticket.worker_id != self.worker_id:
            raise errors.InvalidArgumentError(
                "the ticket names a push of worker %d, and this client is worker %d: a push is "
                "made again only by the client that made it; nothing was sent" %
                (ticket.worker_id, self.worker_id))
        if ticket.table != table:
            raise errors.InvalidArgumentError(
                "the ticket names a push to table \"%s\", not \"%s\"; nothing was sent" %
                (ticket.table, table))
        if not ticket.runs:
            raise errors.InvalidArgumentError("the ticket names no request; nothing was sent")
        with self._lock:
            newest = self._next_sequence - 1
        if ticket.first_sequence + push_ticket.WINDOW < newest:
            raise errors.InvalidArgumentError(
                "the push of sequences %d to %d is too old to be made again: this client has "
                "numbered requests up to %d since, and a server tells whether it applied a "
                "sequence only within the %d below a worker's newest (proto/ps.proto rule 5); "
                "nothing was sent, and whether its parts were applied cannot be told" %
                (ticket.first_sequence, ticket.last_sequence, newest, push_ticket.WINDOW))
        if push_ticket.fingerprint(keys, grads) != ticket.fingerprint:
            raise errors.InvalidArgumentError(
                "the keys or gradients differ from those of the push to table \"%s\" the ticket "
                "names (sequences %d to %d); nothing was sent" %
                (table, ticket.first_sequence, ticket.last_sequence))

    @staticmethod
    def _other_keys(ticket, table):
        return errors.InvalidArgumentError(
            "the keys of this push to table \"%s\" are not those of the push its ticket names "
            "(sequences %d to %d); nothing was sent" %
            (table, ticket.first_sequence, ticket.last_sequence))

    def _take_sequences(self, count):
        with self._lock:
            first = self._next_sequence
            self._next_sequence += max(1, count)
            return first

    def _fill_header(self, current, header):
        header.map_version = current.version
        header.worker_id = self.worker_id
        header.clock = self._clock

    def _check_open(self):
        if self._closed:
            raise errors.FailedPreconditionError("the client is closed")


def _result(call, what, address):
    try:
        return call.result()
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e, "%s to %s" % (what, address)) from None
