// Child processes for integration tests: the project's daemons started for real, on loopback
// ports they pick themselves, and stopped or killed for real.
//
// Binaries are paths relative to the test's working directory (Bazel's runfiles), e.g.
// "server/coordinator/ps_coordinator" with `data = ["//server/coordinator:ps_coordinator"]`.
// Files (logs, port files) go to $TEST_TMPDIR, or /tmp outside Bazel.
#ifndef PS_TESTS_TESTING_DAEMON_H_
#define PS_TESTS_TESTING_DAEMON_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace testing {

// A Daemon is a child process of ours that serves on a port it reports through --port_file. Its
// stdout and stderr go to log_path(). Children die with the thread that started them (the
// parent-death signal), so start daemons from a thread that outlives them, such as the test's.
// Thread-compatible.
class Daemon {
 public:
  // Starts `binary` with `args` plus `--port_file=<a new file>` (and `--listen=127.0.0.1:0` when
  // `args` have no --listen) and waits, polling the file, until
  // it holds the port. FAILED_PRECONDITION with the tail of the log if the child exits first
  // (e.g. "... exited with status 1 ..."); DEADLINE_EXCEEDED (the child is killed) if no port
  // comes within `timeout`; INTERNAL if the process cannot be started.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const std::string& binary,
                                                       std::vector<std::string> args,
                                                       absl::Duration timeout = absl::Seconds(30));

  // Starts `binary` with `args` as they are, for a child that reports no port (a ps_worker):
  // port() is 0. INTERNAL if the process cannot be started.
  static absl::StatusOr<std::unique_ptr<Daemon>> Launch(const std::string& binary,
                                                        const std::vector<std::string>& args);

  // Kills the child if it still runs.
  ~Daemon();

  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:PORT".
  std::string address() const;
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // Everything the child wrote so far (empty if the log cannot be read).
  std::string ReadLog() const;

  // SIGKILL, then reaps the child. Does nothing if it was already reaped.
  void Kill();

  // SIGSTOP, then waits until the child is stopped (waitpid with WUNTRACED): once this returns it
  // does nothing until SIGCONT, so a test can count on it (kill() alone returns before the signal
  // takes effect). FAILED_PRECONDITION if it was already reaped; INTERNAL if it ended instead
  // (it is then reaped) or waitpid failed.
  absl::Status Pause();

  // Waits up to `timeout` for the child to exit by itself, and reaps it. Its exit status, or
  // 128 + the signal that ended it. DEADLINE_EXCEEDED if it still runs then (it is left running);
  // FAILED_PRECONDITION if it was already reaped.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // SIGTERM, then waits up to `timeout` for the child to exit. OK iff it exited with status 0;
  // INTERNAL naming the exit status or signal otherwise, with the log's tail; DEADLINE_EXCEEDED if
  // it did not exit in time (it is then killed). FAILED_PRECONDITION if it was already reaped.
  absl::Status Terminate(absl::Duration timeout);

 private:
  Daemon(std::string binary, pid_t pid, std::string log_path)
      : binary_(std::move(binary)), pid_(pid), log_path_(std::move(log_path)) {}

  const std::string binary_;
  const pid_t pid_;
  const std::string log_path_;
  int port_ = 0;
  bool reaped_ = false;
};

// Writes `job_text` to "<TempDir()>/<name>.pbtxt" and starts the ps_coordinator (found at
// "server/coordinator/ps_coordinator" under the test's runfiles) on it, with `extra_args`.
// Errors of writing the file or of Daemon::Start.
absl::StatusOr<std::unique_ptr<Daemon>> StartCoordinator(const std::string& job_text,
                                                         const std::string& name,
                                                         std::vector<std::string> extra_args = {});

// The outcome of RunProcess.
struct ProcessResult {
  // The exit status, or 128 + the signal that ended the process.
  int exit_code = 0;
  std::string stdout_text;
  std::string stderr_text;
};

// Runs `binary` with `args` to its end, its stdout and stderr captured apart. DEADLINE_EXCEEDED
// (the process is killed) if it runs longer than `timeout`; INTERNAL if it cannot be started.
absl::StatusOr<ProcessResult> RunProcess(const std::string& binary,
                                         const std::vector<std::string>& args,
                                         absl::Duration timeout = absl::Seconds(30));

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_DAEMON_H_
