#include "tests/testing/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace testing {
namespace {

constexpr size_t kLogTailBytes = 4096;
// How often the port file and the child's exit are polled.
constexpr absl::Duration kPollInterval = absl::Milliseconds(5);

// A new path under TempDir() named after `binary`, ending in `suffix`.
std::string UniquePath(const std::string& binary, const std::string& suffix) {
  static std::atomic<int> counter{0};
  const size_t slash = binary.rfind('/');
  const std::string base = slash == std::string::npos ? binary : binary.substr(slash + 1);
  return absl::StrCat(TempDir(), "/", base, ".", getpid(), ".", counter.fetch_add(1), suffix);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Tail(const std::string& text) {
  return text.size() <= kLogTailBytes ? text : "..." + text.substr(text.size() - kLogTailBytes);
}

// "exited with status N" or "was killed by signal N".
std::string Describe(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("was killed by signal ", WTERMSIG(wait_status));
  return absl::StrCat("ended with wait status ", wait_status);
}

// Starts `binary` with stdin from /dev/null and stdout/stderr appended to the given files.
absl::StatusOr<pid_t> Spawn(const std::string& binary, const std::vector<std::string>& args,
                            const std::string& stdout_path, const std::string& stderr_path) {
  // Everything the child needs is prepared before fork: after it, in a multi-threaded parent, the
  // child may only make async-signal-safe calls.
  std::vector<std::string> argv_strings;
  argv_strings.push_back(binary);
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string exec_failed = absl::StrCat("daemon: cannot exec ", binary, "\n");

  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out_fd = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int err_fd =
      stderr_path == stdout_path
          ? out_fd
          : open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const auto close_all = [&] {
    for (const int fd : {null_fd, out_fd}) {
      if (fd >= 0) close(fd);
    }
    if (err_fd >= 0 && err_fd != out_fd) close(err_fd);
  };
  if (null_fd < 0 || out_fd < 0 || err_fd < 0) {
    const int error = errno;
    close_all();
    return absl::InternalError(
        absl::StrCat("cannot open the files for ", binary, ": ", std::strerror(error)));
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close_all();
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(error)));
  }
  if (pid == 0) {
    // The child: die with the thread that started us, start from default signal handling.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const int sig : {SIGTERM, SIGINT, SIGPIPE, SIGHUP}) signal(sig, SIG_DFL);
    if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
        dup2(err_fd, STDERR_FILENO) < 0) {
      _exit(127);
    }
    execv(binary.c_str(), argv.data());
    if (write(STDERR_FILENO, exec_failed.data(), exec_failed.size()) < 0) {
    }
    _exit(127);
  }
  close_all();
  return pid;
}

// Waits for `pid` to end until `deadline`. Returns its wait status; DEADLINE_EXCEEDED if it still
// runs at the deadline.
absl::StatusOr<int> WaitUntil(pid_t pid, absl::Time deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid(", pid, "): ", std::strerror(errno)));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("still running");
    absl::SleepFor(std::min(kPollInterval, deadline - now));
  }
}

// Kills and reaps `pid`.
void KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

absl::Status Daemon::Pause() {
  if (reaped_) return absl::FailedPreconditionError(absl::StrCat(binary_, " was reaped"));
  if (kill(pid_, SIGSTOP) != 0) {
    return absl::InternalError(absl::StrCat("kill(", pid_, ", SIGSTOP): ", std::strerror(errno)));
  }
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WUNTRACED);
    if (r == pid_ && WIFSTOPPED(status)) return absl::OkStatus();
    if (r == pid_) {
      reaped_ = true;
      return absl::InternalError(
          absl::StrCat(binary_, " ", Describe(status), " instead of stopping"));
    }
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid(", pid_, "): ", std::strerror(errno)));
    }
  }
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const std::string& binary,
                                                      std::vector<std::string> args,
                                                      absl::Duration timeout) {
  const std::string port_file = UniquePath(binary, ".port");
  const std::string log_path = UniquePath(binary, ".log");
  unlink(port_file.c_str());
  args.push_back(absl::StrCat("--port_file=", port_file));
  // Tests stay on loopback unless they say otherwise.
  if (std::none_of(args.begin(), args.end(),
                   [](const std::string& a) { return absl::StartsWith(a, "--listen="); })) {
    args.push_back("--listen=127.0.0.1:0");
  }
  absl::StatusOr<pid_t> pid = Spawn(binary, args, log_path, log_path);
  if (!pid.ok()) return pid.status();
  std::unique_ptr<Daemon> daemon(new Daemon(binary, *pid, log_path));

  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    // The daemon writes the file through a rename, so a file that exists is complete.
    if (access(port_file.c_str(), F_OK) == 0) {
      const std::string text(absl::StripAsciiWhitespace(ReadFile(port_file)));
      int port = 0;
      if (!absl::SimpleAtoi(text, &port) || port <= 0 || port > 65535) {
        return absl::InternalError(
            absl::StrCat(binary, " wrote \"", text, "\" to its port file ", port_file));
      }
      daemon->port_ = port;
      return daemon;
    }
    int status = 0;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      daemon->reaped_ = true;
      return absl::FailedPreconditionError(absl::StrCat(binary, " ", Describe(status),
                                                        " before reporting its port; log ",
                                                        log_path, ":\n", Tail(daemon->ReadLog())));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      daemon->Kill();
      return absl::DeadlineExceededError(
          absl::StrCat(binary, " did not report its port within ", absl::FormatDuration(timeout),
                       " (killed); log ", log_path, ":\n", Tail(daemon->ReadLog())));
    }
    absl::SleepFor(std::min(kPollInterval, deadline - now));
  }
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Launch(const std::string& binary,
                                                       const std::vector<std::string>& args) {
  const std::string log_path = UniquePath(binary, ".log");
  absl::StatusOr<pid_t> pid = Spawn(binary, args, log_path, log_path);
  if (!pid.ok()) return pid.status();
  return std::unique_ptr<Daemon>(new Daemon(binary, *pid, log_path));
}

Daemon::~Daemon() { Kill(); }

std::string Daemon::address() const { return absl::StrCat("127.0.0.1:", port_); }

std::string Daemon::ReadLog() const { return ReadFile(log_path_); }

void Daemon::Kill() {
  if (reaped_) return;
  KillAndReap(pid_);
  reaped_ = true;
}

absl::StatusOr<int> Daemon::Wait(absl::Duration timeout) {
  if (reaped_) {
    return absl::FailedPreconditionError(absl::StrCat(binary_, " (pid ", pid_, ") has ended"));
  }
  const absl::StatusOr<int> status = WaitUntil(pid_, absl::Now() + timeout);
  if (!status.ok()) return status.status();
  reaped_ = true;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

absl::Status Daemon::Terminate(absl::Duration timeout) {
  if (reaped_) {
    return absl::FailedPreconditionError(absl::StrCat(binary_, " (pid ", pid_, ") has ended"));
  }
  kill(pid_, SIGTERM);
  const absl::StatusOr<int> status = WaitUntil(pid_, absl::Now() + timeout);
  if (!status.ok()) {
    Kill();
    if (status.status().code() != absl::StatusCode::kDeadlineExceeded) return status.status();
    return absl::DeadlineExceededError(
        absl::StrCat(binary_, " did not exit within ", absl::FormatDuration(timeout),
                     " of SIGTERM (killed); log tail:\n", Tail(ReadLog())));
  }
  reaped_ = true;
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(binary_, " ", Describe(*status),
                                          " after SIGTERM; log tail:\n", Tail(ReadLog())));
}

absl::StatusOr<ProcessResult> RunProcess(const std::string& binary,
                                         const std::vector<std::string>& args,
                                         absl::Duration timeout) {
  const std::string out_path = UniquePath(binary, ".stdout");
  const std::string err_path = UniquePath(binary, ".stderr");
  absl::StatusOr<pid_t> pid = Spawn(binary, args, out_path, err_path);
  if (!pid.ok()) return pid.status();
  const absl::StatusOr<int> status = WaitUntil(*pid, absl::Now() + timeout);
  if (!status.ok()) {
    KillAndReap(*pid);
    if (status.status().code() != absl::StatusCode::kDeadlineExceeded) return status.status();
    return absl::DeadlineExceededError(
        absl::StrCat(binary, " ran longer than ", absl::FormatDuration(timeout), " (killed)"));
  }
  ProcessResult result;
  result.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
  result.stdout_text = ReadFile(out_path);
  result.stderr_text = ReadFile(err_path);
  return result;
}

absl::StatusOr<std::unique_ptr<Daemon>> StartCoordinator(const std::string& job_text,
                                                         const std::string& name,
                                                         std::vector<std::string> extra_args) {
  const std::string path = absl::StrCat(TempDir(), "/", name, ".pbtxt");
  {
    std::ofstream out(path);
    out << job_text;
    if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  }
  extra_args.insert(extra_args.begin(), absl::StrCat("--job=", path));
  return Daemon::Start("server/coordinator/ps_coordinator", std::move(extra_args));
}

}  // namespace testing
}  // namespace ps
