"""The client's connection to the coordinator (common/coordinator_client.h, the parts a client
uses): registration, the heartbeat thread, the shard map, and failure reports.

A job may run several coordinators: one leads, the others stand by and answer every call
UNAVAILABLE "coordinator HOST:PORT is a standby; the leader is LEADER_HOST:PORT" (without the
leader when they do not know it); a deposed leader answers UNAVAILABLE, one that is down refuses
connections. Given all their addresses ("a:1,b:2,c:3"), the connection keeps a channel to each and
a current one, and follows the leader as the C++ CoordinatorClient does: a call that fails
UNAVAILABLE (but for the leader's own "shard map not ready") is made again at once, within the same
deadline, on the leader the answer names when it is listed and not yet tried by this call, else on
the next address in list order not yet tried; it raises the last error once every address was
tried. The current address becomes the one that answered, or after a failure the one suggested
(the leader named, else the next in order). The heartbeat thread does the same within each
interval (also on DEADLINE_EXCEEDED), so that after a takeover the new leader is found within
about one interval."""

import re
import threading
import time

import grpc

from proto import coordinator_pb2
from proto import coordinator_pb2_grpc

from . import errors
from . import security as security_lib

# Deadline of the calls that do not wait.
RPC_TIMEOUT_S = 10.0
# At most one failure report per server this often.
REPORT_INTERVAL_S = 0.05
_MAX_MESSAGE_BYTES = 256 << 20
_LEADER_IS = "; the leader is "
_HOST_PORT = re.compile(r"^(\[[^\[\]\s]+\]|[^\[\]\s:]+):(\d+)$")


def parse_addresses(addresses):
    """The list of host:port in ``addresses`` ("host:port", or several comma-separated).
    InvalidArgumentError naming the entry for an empty entry, a bad host:port (a host, and a port
    in 1..65535; IPv6 hosts in brackets) or an address listed twice."""
    if not isinstance(addresses, str):
        raise errors.InvalidArgumentError(
            "coordinator addresses must be a string, got %r" % (addresses,))
    parsed = []
    for i, entry in enumerate(addresses.split(",")):
        if not entry:
            raise errors.InvalidArgumentError(
                "coordinator addresses %r: empty entry %d (expected HOST:PORT, or several "
                "comma-separated)" % (addresses, i + 1))
        match = _HOST_PORT.match(entry)
        if match is None or not 1 <= int(match.group(2)) <= 65535:
            raise errors.InvalidArgumentError(
                "coordinator addresses: bad address %r (expected HOST:PORT, [IPv6]:PORT, the "
                "port from 1 to 65535)" % entry)
        if entry in parsed:
            raise errors.InvalidArgumentError(
                "coordinator addresses: %r is listed twice" % entry)
        parsed.append(entry)
    return parsed


def leader_named_in(message):
    """The leader's host:port a standby's UNAVAILABLE message names, or ""."""
    at = (message or "").find(_LEADER_IS)
    if at < 0:
        return ""
    return re.split(r"[ ;,)]", message[at + len(_LEADER_IS):], maxsplit=1)[0]


def _moves_on(code, details, heartbeat=False):
    """Whether an answer sends a call on to another coordinator."""
    if heartbeat and code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return True
    return (code == grpc.StatusCode.UNAVAILABLE and
            not (details or "").startswith("shard map not ready"))


class CoordinatorConnection:
    """A connection to a job's coordinators, following the leader (the module's comment), with an
    optional heartbeat thread. Thread-safe."""

    def __init__(self, address, timeout, security=None):
        """Connects to ``address``: host:port, or several comma-separated (the job's
        coordinators), with ``security`` (a security.Security; None: plaintext). The first
        address in list order whose connection is up becomes the current one.
        InvalidArgumentError naming the entry for a bad list; UnavailableError if no connection
        is up within ``timeout`` seconds."""
        self.addresses = parse_addresses(address)
        security = security or security_lib.Security()
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            # A coordinator that restarts is back within seconds: reconnect soon.
            ("grpc.initial_reconnect_backoff_ms", 100),
            # Not a backoff but the least time gRPC gives one connection attempt: a first TLS
            # handshake on a busy machine takes over 100 ms, and the attempt would fail (the C++
            # coordinator client gives it 5 s too).
            ("grpc.min_reconnect_backoff_ms", 5000),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        self._channels = [security.channel(a, options) for a in self.addresses]
        self._current = self._wait_for_any(timeout)
        if self._current is None:
            for channel in self._channels:
                channel.close()
            raise errors.UnavailableError(
                "%s %s not reachable within %gs (%s)" %
                ("coordinator at" if len(self.addresses) == 1 else "no coordinator of", address,
                 timeout, security_lib.unreachable_hint(security.tls))) from None
        self._stubs = [coordinator_pb2_grpc.CoordinatorStub(c) for c in self._channels]
        self._lock = threading.Lock()
        self._last_report = {}  # server_id -> time.monotonic() of its last failure report
        self._stop = threading.Event()
        self._soon = threading.Event()  # set by stop_heartbeats and heartbeat_soon
        self._thread = None
        self._heartbeat_call = None
        self.last_heartbeat_error = None  # the latest heartbeat's PsError, None after a success

    @property
    def address(self):
        """The current coordinator's host:port (where the next call goes first)."""
        with self._lock:
            return self.addresses[self._current]

    def register(self, role, rank):
        """Registers a member of ``role`` (coordinator_pb2.Role) asking for ``rank`` (-1: any)."""
        request = coordinator_pb2.RegisterRequest(role=role, rank=rank)
        return self._call("Register", request, RPC_TIMEOUT_S)

    def heartbeat(self, member_id):
        """One heartbeat for ``member_id``; returns the HeartbeatResponse."""
        request = coordinator_pb2.HeartbeatRequest(member_id=member_id)
        return self._call("Heartbeat", request, RPC_TIMEOUT_S)

    def get_shard_map(self, min_version, timeout):
        """The shard map of version >= ``min_version``, waiting up to ``timeout`` s for it."""
        request = coordinator_pb2.GetShardMapRequest(min_version=min_version)
        return self._call("GetShardMap", request, timeout)

    def status(self):
        """The cluster's status (members, shard map, clocks)."""
        return self._call("GetStatus", coordinator_pb2.StatusRequest(), RPC_TIMEOUT_S)

    def report_failure_async(self, reporter, server_id, reason):
        """Tells the coordinator that ``reporter`` could not reach ``server_id``, without waiting;
        at most once per server every REPORT_INTERVAL_S. The coordinator checks the server at
        once and fails it over when it is gone."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_report.get(server_id, -1e9) < REPORT_INTERVAL_S:
                return
            self._last_report[server_id] = now
        request = coordinator_pb2.ReportFailureRequest(
            reporter=reporter, server_id=server_id, reason=reason)
        deadline = time.monotonic() + 5.0
        tried = set()

        def send(at):
            tried.add(at)
            future = self._stubs[at].ReportFailure.future(
                request, timeout=max(deadline - time.monotonic(), 0.001))
            future.add_done_callback(lambda f: done(at, f))

        def done(at, future):
            error = future.exception()  # the outcome is not needed, but it moves on
            if error is None or not _moves_on(error.code(), error.details()):
                self._answered(at)
                return
            following = self._next(at, error.details(), tried)
            if following is not None and time.monotonic() < deadline:
                send(following)

        with self._lock:
            first = self._current
        send(first)

    def start_heartbeats(self, member_id, interval_s, on_map_version=None):
        """Heartbeats for ``member_id`` every ``interval_s`` on a thread until stop_heartbeats.

        ``on_map_version(version)`` is called on that thread with the map version each answer
        carries. A failed heartbeat is kept in last_heartbeat_error and retried next interval.
        """
        if interval_s <= 0:
            raise errors.InvalidArgumentError("heartbeat interval must be > 0")
        if self._thread is not None:
            raise errors.FailedPreconditionError("heartbeats are already running")
        self._thread = threading.Thread(
            target=self._heartbeat_loop, args=(member_id, interval_s, on_map_version),
            name="ps-heartbeat-%d" % member_id, daemon=True)
        self._thread.start()

    def stop_heartbeats(self):
        """Stops the heartbeat thread (cancelling a heartbeat in flight) and joins it."""
        self._stop.set()
        self._soon.set()
        with self._lock:
            call = self._heartbeat_call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self):
        """Stops heartbeats and closes the channels. Idempotent."""
        self.stop_heartbeats()
        for channel in self._channels:
            channel.close()

    def heartbeat_soon(self):
        """Makes the heartbeat thread send its next heartbeat now."""
        self._soon.set()

    def _heartbeat_loop(self, member_id, interval_s, on_map_version):
        request = coordinator_pb2.HeartbeatRequest(member_id=member_id)
        # A slow answer is still worth having for up to a second even with shorter intervals.
        timeout = min(max(interval_s, 1.0), RPC_TIMEOUT_S)
        while not self._stop.is_set():
            # The current coordinator, then at once the next candidates while they fail.
            tried = set()
            with self._lock:
                at = self._current
            while True:
                tried.add(at)
                call = self._stubs[at].Heartbeat.future(request, timeout=timeout)
                with self._lock:
                    self._heartbeat_call = call
                if self._stop.is_set():
                    call.cancel()
                try:
                    response = call.result()
                    self._answered(at)
                    self.last_heartbeat_error = None
                    if on_map_version is not None:
                        on_map_version(response.map_version)
                    break
                except grpc.FutureCancelledError:
                    return
                except grpc.RpcError as e:
                    self.last_heartbeat_error = errors.from_rpc_error(e, "Heartbeat")
                    if not _moves_on(e.code(), e.details(), heartbeat=True):
                        self._answered(at)
                        break
                    following = self._next(at, e.details(), tried)
                    if following is None:
                        break
                    at = following
                except Exception as e:  # pylint: disable=broad-except
                    # The heartbeats go on whatever the callback did; the error is kept.
                    self.last_heartbeat_error = e
                    break
                finally:
                    with self._lock:
                        self._heartbeat_call = None
            self._soon.wait(interval_s)
            self._soon.clear()

    def _wait_for_any(self, timeout):
        """The index of the first channel (in list order) whose connection is up within
        ``timeout`` seconds, or None."""
        futures = [grpc.channel_ready_future(c) for c in self._channels]
        some_ready = threading.Event()
        for future in futures:
            future.add_done_callback(lambda f: some_ready.set())
        some_ready.wait(timeout)
        up = None
        for i, future in enumerate(futures):
            if up is None and future.done() and not future.cancelled():
                up = i
            else:
                future.cancel()
        return up

    def _answered(self, at):
        with self._lock:
            self._current = at

    def _next(self, at, details, tried):
        """Coordinator ``at`` answered UNAVAILABLE with ``details``: moves the current address
        from ``at`` (if still there) to the leader named if listed, else the next in order;
        returns the address to try next (the module's rule over those not in ``tried``), or
        None when every one was tried."""
        n = len(self.addresses)
        leader = leader_named_in(details)
        named = None
        if leader in self.addresses and self.addresses.index(leader) != at:
            named = self.addresses.index(leader)
        with self._lock:
            if self._current == at:
                self._current = named if named is not None else (at + 1) % n
        if named is not None and named not in tried:
            return named
        for step in range(1, n):
            if (at + step) % n not in tried:
                return (at + step) % n
        return None

    def _call(self, method, request, timeout):
        """Calls ``method`` (a Coordinator method's name) on the current coordinator, then on
        the others while it fails UNAVAILABLE, within ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        tried = set()
        with self._lock:
            at = self._current
        while True:
            tried.add(at)
            try:
                response = getattr(self._stubs[at], method)(
                    request, timeout=max(deadline - time.monotonic(), 0.001))
                self._answered(at)
                return response
            except grpc.RpcError as e:
                following = None
                if _moves_on(e.code(), e.details()):
                    following = self._next(at, e.details(), tried)
                else:
                    self._answered(at)
                if following is None or time.monotonic() >= deadline:
                    raise errors.from_rpc_error(e, method) from None
                at = following
