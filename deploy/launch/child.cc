#include "deploy/launch/child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace ps {
namespace launch {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);

// Starts `argv` with stdin `stdin_fd`, stdout and stderr `out_fd` (every other descriptor of
// ours is close-on-exec).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int stdin_fd, int out_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  // Its own process group: a Ctrl-C at the launcher's terminal reaches the launcher only, which
  // then stops the daemons in order.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // The launcher blocks the stop signals (it takes them with sigtimedwait): its children start
  // with none blocked and the default actions.
  sigset_t none;
  sigemptyset(&none);
  sigset_t stop;
  sigemptyset(&stop);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&stop, signal);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &stop);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat(
        "cannot start ", absl::StrJoin(argv, " ").substr(0, 200), ": ", std::strerror(rc)));
  }
  return pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Child>> Child::Start(const std::vector<std::string>& argv,
                                                    const std::string& log) {
  const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open log ", log, ": ", std::strerror(errno)));
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(out);
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  absl::StatusOr<pid_t> pid = Spawn(argv, pipe_fds[0], out);
  close(out);
  close(pipe_fds[0]);
  if (!pid.ok()) {
    close(pipe_fds[1]);
    return pid.status();
  }
  return std::unique_ptr<Child>(new Child(*pid, pipe_fds[1]));
}

Child::~Child() {
  CloseStdin();
  if (!status_.has_value()) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void Child::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

std::optional<int> Child::Poll() {
  if (status_.has_value()) return status_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  return status_;
}

std::optional<int> Child::WaitUntil(absl::Time deadline) {
  while (true) {
    if (std::optional<int> status = Poll()) return status;
    const absl::Time now = absl::Now();
    if (now >= deadline) return std::nullopt;
    absl::SleepFor(std::min(kPoll, deadline - now));
  }
}

void Child::Signal(int signal) {
  if (!Poll().has_value()) kill(pid_, signal);
}

absl::StatusOr<Captured> RunCaptured(const std::vector<std::string>& argv, absl::Duration timeout) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  absl::StatusOr<pid_t> pid = Spawn(argv, null, pipe_fds[1]);
  close(null);
  close(pipe_fds[1]);
  if (!pid.ok()) {
    close(pipe_fds[0]);
    return pid.status();
  }
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  Captured captured;
  const absl::Time deadline = absl::Now() + timeout;
  // Once the child has exited, a process it left behind may still hold the pipe: its output is
  // read for a moment more, not waited for.
  absl::Time drain_until = absl::InfiniteFuture();
  std::optional<int> status;
  while (true) {
    char buffer[4096];
    const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
    if (n > 0) {
      captured.output.append(buffer, n);
      continue;
    }
    const bool pipe_closed = n == 0;
    int wait_status = 0;
    if (!status.has_value() && waitpid(*pid, &wait_status, WNOHANG) == *pid) {
      status = wait_status;
      drain_until = absl::Now() + absl::Milliseconds(200);
    }
    if (status.has_value() && (pipe_closed || absl::Now() >= drain_until)) break;
    if (absl::Now() >= deadline) {
      kill(*pid, SIGKILL);
      while (waitpid(*pid, &wait_status, 0) < 0 && errno == EINTR) {
      }
      status = wait_status;
      captured.timed_out = true;
      break;
    }
    absl::SleepFor(kPoll);
  }
  close(pipe_fds[0]);
  captured.status = status.value_or(0);
  return captured;
}

std::string ExitDescription(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(wait_status));
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

bool ExitedCleanly(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

}  // namespace launch
}  // namespace ps
