// Child processes of ps_launch: a daemon's ssh (or sh) with its output in a log file and its
// stdin a pipe the launcher holds, and short commands whose output is captured.
#ifndef PS_DEPLOY_LAUNCH_CHILD_H_
#define PS_DEPLOY_LAUNCH_CHILD_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace launch {

// A Child is a process started by this one. Thread-compatible.
class Child {
 public:
  // Starts argv[0] (searched in PATH) with `argv`, its stdout and stderr appended to the file
  // `log` (created if needed), and its stdin a pipe held by this object. INTERNAL when the
  // process cannot be started (the message names the command), FAILED_PRECONDITION when the
  // log cannot be opened.
  static absl::StatusOr<std::unique_ptr<Child>> Start(const std::vector<std::string>& argv,
                                                      const std::string& log);

  // Kills (SIGKILL) and reaps the process if it still runs.
  ~Child();

  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // Closes the stdin pipe: the daemon scripts stop their daemon on it (plan.h). Idempotent.
  void CloseStdin();

  // The wait status (as waitpid gives it) once the process has exited, else nullopt. Reaps it.
  std::optional<int> Poll();

  // Polls until the process exits or `deadline`; the wait status, or nullopt at the deadline.
  std::optional<int> WaitUntil(absl::Time deadline);

  // Sends `signal` to the process, if it still runs.
  void Signal(int signal);

 private:
  Child(pid_t pid, int stdin_fd) : pid_(pid), stdin_fd_(stdin_fd) {}

  const pid_t pid_;
  int stdin_fd_;
  std::optional<int> status_;
};

// The output of a finished command.
struct Captured {
  int status = 0;      // the wait status; see ExitDescription
  std::string output;  // stdout and stderr, interleaved
  bool timed_out = false;
};

// Runs `argv` with stdin from /dev/null and waits up to `timeout` for it (then kills it and sets
// timed_out). INTERNAL when it cannot be started.
absl::StatusOr<Captured> RunCaptured(const std::vector<std::string>& argv, absl::Duration timeout);

// "exited with status 1", "was killed by signal 9".
std::string ExitDescription(int wait_status);

// Whether the wait status is a clean exit 0.
bool ExitedCleanly(int wait_status);

}  // namespace launch
}  // namespace ps

#endif  // PS_DEPLOY_LAUNCH_CHILD_H_
