"""A job's coordinator and servers as child processes on loopback, for tests, examples and
benchmarks on one machine (clusters proper are started with ps_launch).

    with LocalCluster(job_text, bin_dir="bazel-bin") as cluster:
        with ps_client.connect(cluster.address) as client:
            ...

Daemons bind 127.0.0.1 port 0 and report their port through --port_file; their output goes to
log files in the cluster's folder. Leaving the ``with`` block (or stop()) kills them.
"""

import atexit
import os
import re
import signal
import subprocess
import tempfile
import time

COORDINATOR = "server/coordinator/ps_coordinator"
SERVER = "server/ps_server"
_LOG_TAIL_BYTES = 4096


class DaemonError(RuntimeError):
    """A daemon exited or did not report its port in time; the message ends with its log."""


class Daemon:
    """One child process serving on a port it reports through --port_file."""

    def __init__(self, binary, args, folder, name, timeout=30.0):
        """Starts ``binary`` with ``args`` plus --port_file (and --listen=127.0.0.1:0 unless
        ``args`` has a --listen) and waits for its port; DaemonError if it exits first or no
        port comes within ``timeout`` seconds (it is killed)."""
        self.name = name
        self.log_path = os.path.join(folder, name + ".log")
        port_file = os.path.join(folder, name + ".port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        args = list(args) + ["--port_file=" + port_file]
        if not any(a.startswith("--listen=") for a in args):
            args.append("--listen=127.0.0.1:0")
        if not os.access(binary, os.X_OK):
            raise DaemonError("%s: no such executable (build it, or pass bin_dir)" % binary)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([binary] + args, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT)
        _live.add(self)
        deadline = time.monotonic() + timeout
        while True:
            # The daemon writes the file through a rename: a file that exists is complete.
            if os.path.exists(port_file):
                with open(port_file) as f:
                    self.port = int(f.read().strip())
                return
            if self.process.poll() is not None:
                raise DaemonError("%s exited with status %d before reporting its port:\n%s" %
                                  (name, self.process.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                self.kill()
                raise DaemonError("%s did not report its port within %gs (killed):\n%s" %
                                  (name, timeout, self.log_tail()))
            time.sleep(0.005)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self):
        """SIGKILL, then reap. Does nothing if the process was reaped already."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        _live.discard(self)

    def terminate(self, timeout=10.0):
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait()
        _live.discard(self)
        return code


class LocalCluster:
    """A coordinator and the job's servers, started on loopback."""

    def __init__(self, job_text, bin_dir, folder=None, coordinator_args=(), server_args=(),
                 num_servers=None):
        """Starts the coordinator on ``job_text`` (protobuf text of proto/job.proto) and
        ``num_servers`` servers (default: the job's cluster.num_servers). Binaries are under
        ``bin_dir`` as in bazel-bin (server/ps_server, server/coordinator/ps_coordinator); logs
        and the job go to ``folder`` (default: a new temporary folder)."""
        self.bin_dir = bin_dir
        self.folder = folder or tempfile.mkdtemp(prefix="ps_local_cluster.")
        self.servers = []
        self._server_args = list(server_args)
        self.job_path = os.path.join(self.folder, "job.pbtxt")
        with open(self.job_path, "w") as f:
            f.write(job_text)
        if num_servers is None:
            match = re.search(r"num_servers\s*:\s*(\d+)", job_text)
            num_servers = int(match.group(1)) if match else 1
        try:
            self.coordinator = Daemon(os.path.join(bin_dir, COORDINATOR),
                                      ["--job=" + self.job_path] + list(coordinator_args),
                                      self.folder, "coordinator")
            for _ in range(num_servers):
                self.add_server()
        except BaseException:
            self.stop()
            raise

    @property
    def address(self):
        """host:port of the coordinator."""
        return self.coordinator.address

    def add_server(self, args=()):
        """Starts one more server (with ``args``, e.g. a --listen of a killed one)."""
        server = Daemon(os.path.join(self.bin_dir, SERVER),
                        ["--coordinator=" + self.address] + self._server_args + list(args),
                        self.folder, "server%d" % len(self.servers))
        self.servers.append(server)
        return server

    def stop(self):
        """Kills every daemon still running."""
        for daemon in self.servers + [getattr(self, "coordinator", None)]:
            if daemon is not None:
                daemon.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


# Daemons still running, killed when the interpreter exits, whatever the caller forgot.
_live = set()


@atexit.register
def _kill_live():
    for daemon in list(_live):
        daemon.kill()
