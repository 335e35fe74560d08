"""The client's connection to the coordinator (common/coordinator_client.h, the parts a client
uses): registration, the heartbeat thread, the shard map, and failure reports."""

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


class CoordinatorConnection:
    """A connection to a job's coordinator, with an optional heartbeat thread. Thread-safe."""

    def __init__(self, address, timeout, security=None):
        """Connects to ``address`` (host:port) with ``security`` (a security.Security; None:
        plaintext); UnavailableError if it is not up within ``timeout`` seconds."""
        self.address = address
        security = security or security_lib.Security()
        self._channel = security.channel(address, [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            # A coordinator that restarts is back within seconds: reconnect soon.
            ("grpc.initial_reconnect_backoff_ms", 100),
            # Not a backoff but the least time gRPC gives one connection attempt: a first TLS
            # handshake on a busy machine takes over 100 ms, and the attempt would fail (the C++
            # coordinator client gives it 5 s too).
            ("grpc.min_reconnect_backoff_ms", 5000),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ])
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise errors.UnavailableError(
                "coordinator at %s not reachable within %gs (%s)" %
                (address, timeout, security_lib.unreachable_hint(security.tls))) from None
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)
        self._lock = threading.Lock()
        self._last_report = {}  # server_id -> time.monotonic() of its last failure report
        self._stop = threading.Event()
        self._thread = None
        self._heartbeat_call = None
        self.last_heartbeat_error = None  # the latest heartbeat's PsError, None after a success

    def register(self, role, rank):
        """Registers a member of ``role`` (coordinator_pb2.Role) asking for ``rank`` (-1: any)."""
        request = coordinator_pb2.RegisterRequest(role=role, rank=rank)
        return self._call(self._stub.Register, request, RPC_TIMEOUT_S, "Register")

    def get_shard_map(self, min_version, timeout):
        """The shard map of version >= ``min_version``, waiting up to ``timeout`` s for it."""
        request = coordinator_pb2.GetShardMapRequest(min_version=min_version)
        return self._call(self._stub.GetShardMap, request, timeout, "GetShardMap")

    def status(self):
        """The cluster's status (members, shard map, clocks)."""
        return self._call(self._stub.GetStatus, coordinator_pb2.StatusRequest(), RPC_TIMEOUT_S,
                          "GetStatus")

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
        future = self._stub.ReportFailure.future(request, timeout=5.0)
        future.add_done_callback(lambda f: f.exception())  # the outcome is not needed

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
        with self._lock:
            call = self._heartbeat_call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self):
        """Stops heartbeats and closes the channel. Idempotent."""
        self.stop_heartbeats()
        self._channel.close()

    def _heartbeat_loop(self, member_id, interval_s, on_map_version):
        request = coordinator_pb2.HeartbeatRequest(member_id=member_id)
        # A slow answer is still worth having for up to a second even with shorter intervals.
        timeout = min(max(interval_s, 1.0), RPC_TIMEOUT_S)
        while not self._stop.is_set():
            call = self._stub.Heartbeat.future(request, timeout=timeout)
            with self._lock:
                self._heartbeat_call = call
            if self._stop.is_set():
                call.cancel()
            try:
                response = call.result()
                self.last_heartbeat_error = None
                if on_map_version is not None:
                    on_map_version(response.map_version)
            except grpc.FutureCancelledError:
                break
            except grpc.RpcError as e:
                self.last_heartbeat_error = errors.from_rpc_error(e, "Heartbeat")
            except Exception as e:  # pylint: disable=broad-except
                # The heartbeats go on whatever the callback did; the error is kept.
                self.last_heartbeat_error = e
            finally:
                with self._lock:
                    self._heartbeat_call = None
            self._stop.wait(interval_s)

    @staticmethod
    def _call(method, request, timeout, what):
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, what) from None
