// tcp_loopback_bench: how fast one loopback TCP connection moves bytes on this machine, with no
// library above the sockets: the floor under every figure of ps_bench and allreduce_bench.
//
// A thread of this process accepts a connection and reads into a --chunk_kib buffer while the main
// thread writes --mib MiB in chunks of the same size; each of --rounds rounds is timed from the
// first write to the last byte read. Prints one JSON line with the median and every round:
//   {"bench":"tcp_loopback","bytes":...,"chunk_bytes":...,"gbps":...,"rounds_gbps":[...]}
// gbps is 10^9 bytes per second.
//
//   bazel build -c opt //tests/bench:tcp_loopback_bench &&
//   bazel-out/k8-opt/bin/tests/bench/tcp_loopback_bench
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

ABSL_FLAG(int, mib, 2048, "MiB to move per round");
ABSL_FLAG(int, chunk_kib, 1024, "bytes per write and per read, in KiB");
ABSL_FLAG(int, rounds, 3, "timed rounds (each over a new connection)");

namespace {

void ReportErrno(const char* what) {
  std::fprintf(stderr, "tcp_loopback_bench: %s: %s\n", what, std::strerror(errno));
}

// Moves `total` bytes over a new loopback connection; the seconds it took, or a negative value.
double Round(int64_t total, size_t chunk) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ReportErrno("listen");
    return -1;
  }
  int64_t received = 0;
  absl::Time done;
  std::thread reader([&] {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::vector<char> buffer(chunk);
    while (received < total) {
      const ssize_t n = read(fd, buffer.data(), buffer.size());
      if (n <= 0) break;
      received += n;
    }
    done = absl::Now();
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ReportErrno("connect");
    shutdown(listener, SHUT_RDWR);
    reader.join();
    return -1;
  }
  std::vector<char> buffer(chunk, 1);
  const absl::Time start = absl::Now();
  for (int64_t sent = 0; sent < total;) {
    const ssize_t n =
        write(fd, buffer.data(), static_cast<size_t>(std::min<int64_t>(chunk, total - sent)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += n;
  }
  reader.join();
  close(fd);
  close(listener);
  return received == total ? absl::ToDoubleSeconds(done - start) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t total = int64_t{absl::GetFlag(FLAGS_mib)} << 20;
  const size_t chunk = static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_chunk_kib))) << 10;
  std::vector<double> gbps;
  for (int round = 0; round < std::max(1, absl::GetFlag(FLAGS_rounds)); ++round) {
    const double seconds = Round(total, chunk);
    if (seconds <= 0) {
      std::fprintf(stderr, "tcp_loopback_bench: round %d did not move every byte\n", round);
      return 1;
    }
    gbps.push_back(total / seconds / 1e9);
  }
  std::vector<double> sorted = gbps;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "{\"bench\":\"tcp_loopback\",\"bytes\":%lld,\"chunk_bytes\":%zu,\"gbps\":%.3f,"
      "\"rounds_gbps\":[%s]}\n",
      static_cast<long long>(total), chunk, sorted[sorted.size() / 2],
      absl::StrJoin(gbps, ",", [](std::string* out, double x) {
        char text[32];
        std::snprintf(text, sizeof(text), "%.3f", x);
        out->append(text);
      }).c_str());
  return 0;
}
