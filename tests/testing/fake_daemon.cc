// fake_daemon: a stand-in daemon for daemon_test. It reports --port through --port_file like the
// project's daemons, then behaves as --mode says:
//   serve       exit 0 on SIGTERM
//   fail_term   exit 3 on SIGTERM
//   ignore_term ignore SIGTERM (only SIGKILL ends it)
//   exit        exit --exit_code at once, before reporting a port, with a message on stderr
//   no_port     never report a port; exit 0 on SIGTERM
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, port_file, "", "Where to report the port.");
ABSL_FLAG(std::string, listen, "127.0.0.1:4242",
          "HOST:PORT, as our daemons take it; PORT is reported (4242 for port 0).");
ABSL_FLAG(std::string, mode, "serve", "serve, fail_term, ignore_term, exit or no_port.");
ABSL_FLAG(int, exit_code, 3, "The exit status of --mode=exit.");

namespace {

int g_pipe[2];

extern "C" void OnTerm(int) {
  const char byte = 1;
  if (write(g_pipe[1], &byte, 1) < 0) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "exit") {
    std::fprintf(stderr, "fake_daemon: failing on purpose\n");
    return absl::GetFlag(FLAGS_exit_code);
  }
  if (pipe(g_pipe) != 0) return 10;
  if (mode == "ignore_term") {
    signal(SIGTERM, SIG_IGN);
  } else {
    signal(SIGTERM, OnTerm);
  }
  // Before the port file, so that a started daemon's log has it.
  std::printf("fake_daemon listening\n");
  std::fflush(stdout);
  if (mode != "no_port") {
    const std::string path = absl::GetFlag(FLAGS_port_file);
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return 11;
    const std::string listen = absl::GetFlag(FLAGS_listen);
    const int port = std::atoi(listen.substr(listen.rfind(':') + 1).c_str());
    std::fprintf(f, "%d\n", port == 0 ? 4242 : port);
    std::fclose(f);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) return 12;
  }
  char byte;
  while (read(g_pipe[0], &byte, 1) != 1) {
  }
  return mode == "fail_term" ? 3 : 0;
}
