"""What the Python client's tests share: where the binaries are, the C++ peer, recording
interceptors, and waiting on a condition with a deadline."""

import os
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ps_client.local_cluster import LocalCluster  # noqa: E402  (after the path is set)

# The daemons and cpp_peer, laid out as in bazel-bin (run_python.sh sets it to the runfiles).
BIN_DIR = os.environ.get("PS_BIN_DIR", "bazel-bin")
CPP_PEER = os.path.join(BIN_DIR, "client/python/cpp_peer")


def temp_dir():
    """A new folder under $TEST_TMPDIR (Bazel's, removed after the test) or /tmp."""
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


def start_cluster(job_text, **kwargs):
    """A LocalCluster of the job on this test's binaries, its logs in a temporary folder."""
    return LocalCluster(job_text, BIN_DIR, folder=temp_dir(), **kwargs)


def wait_until(condition, timeout=30.0, what="the condition"):
    """Polls ``condition()`` until it is true; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("%s did not hold within %gs" % (what, timeout))
        time.sleep(0.01)


class CppPeer:
    """The C++ client (client/python/testing/cpp_peer.cc) against one coordinator."""

    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.folder = temp_dir()

    def _run(self, *args):
        result = subprocess.run([CPP_PEER] + list(args), capture_output=True, text=True,
                                timeout=300)
        if result.returncode != 0:
            raise AssertionError("cpp_peer %s failed (%d): %s" %
                                 (" ".join(args), result.returncode, result.stderr))
        return result.stdout

    def _file(self, name, array=None):
        path = os.path.join(self.folder, name)
        if array is not None:
            np.ascontiguousarray(array).tofile(path)
        return path

    def pull(self, table, keys, dim):
        out = self._file("rows")
        self._run("pull", "--coordinator=" + self.coordinator, "--table=" + table,
                  "--keys=" + self._file("keys", keys.astype("<u8")), "--out=" + out)
        return np.fromfile(out, dtype="<f4").reshape(len(keys), dim)

    def push(self, table, keys, grads):
        self._run("push", "--coordinator=" + self.coordinator, "--table=" + table,
                  "--keys=" + self._file("keys", keys.astype("<u8")),
                  "--grads=" + self._file("grads", grads.astype("<f4")))

    def pull_dense(self, name, size):
        out = self._file("dense")
        self._run("pull_dense", "--coordinator=" + self.coordinator, "--name=" + name,
                  "--size=%d" % size, "--out=" + out)
        return np.fromfile(out, dtype="<f4")

    def push_dense(self, name, values, gradient=False):
        self._run("push_dense", "--coordinator=" + self.coordinator, "--name=" + name,
                  "--values=" + self._file("values", values.astype("<f4")),
                  "--gradient=%s" % ("true" if gradient else "false"))


def cpp_plan(table, keys, shard_to_server, max_keys):
    """The C++ client's plan: ([(server, [(shard, count), ...]), ...], unique keys)."""
    peer = CppPeer("")
    out = peer._file("unique")
    text = peer._run("plan", "--table=" + table,
                     "--shard_to_server=" + ",".join(str(s) for s in shard_to_server),
                     "--max_keys=%d" % max_keys,
                     "--keys=" + peer._file("keys", keys.astype("<u8")), "--out=" + out)
    parts = []
    for line in text.splitlines():
        fields = line.split()
        assert fields[0] == "part", line
        runs = [tuple(int(x) for x in run.split(":")) for run in fields[2:]]
        parts.append((int(fields[1]), runs))
    return parts, np.fromfile(out, dtype="<u8")


class Recorder(grpc.UnaryUnaryClientInterceptor):
    """Records every call (method, request, response bytes or error) through the channels it
    is given to (ClientOptions.interceptors); ``lose_replies[method] = n`` makes the next n
    successful calls of ``method`` fail UNAVAILABLE after the server answered them, as when a
    reply is lost on the way back."""

    def __init__(self):
        self.calls = []  # (method, request, response) with response bytes/message or None
        self.failures = []  # (method, grpc.StatusCode) of the calls that failed
        self.lose_replies = {}
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation, client_call_details, request):
        outcome = continuation(client_call_details, request)
        method = client_call_details.method
        failed = outcome.exception() is not None
        response = None if failed else outcome.result()
        with self._lock:
            self.calls.append((method, request, response))
            if failed:
                self.failures.append((method, outcome.exception().code()))
            lose = not failed and self.lose_replies.get(method, 0) > 0
            if lose:
                self.lose_replies[method] -= 1
        return _LostReply(outcome) if lose else outcome

    def of(self, method_suffix):
        with self._lock:
            return [c for c in self.calls if c[0].endswith(method_suffix)]

    def clear(self):
        with self._lock:
            self.calls.clear()
            self.failures.clear()


class _LostReply(grpc.RpcError, grpc.Future, grpc.Call):
    """An answered call whose reply never arrived: UNAVAILABLE."""

    def __init__(self, outcome):
        self._outcome = outcome

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "reply lost (test)"

    def result(self, timeout=None):
        raise self

    def exception(self, timeout=None):
        return self

    def traceback(self, timeout=None):
        return None

    def add_done_callback(self, fn):
        fn(self)

    def cancel(self):
        return False

    def cancelled(self):
        return False

    def running(self):
        return False

    def done(self):
        return True

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def add_callback(self, callback):
        return False

    def initial_metadata(self):
        return None

    def trailing_metadata(self):
        return None
