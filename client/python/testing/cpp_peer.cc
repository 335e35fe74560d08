// cpp_peer: the C++ client (//client:ps_client) driven from the Python tests, which compare what
// it writes and reads with the Python client's, bit for bit. Files are raw little-endian arrays:
// keys uint64, rows and gradients float32 (row-major, dim floats per key).
//
//   cpp_peer pull --coordinator=HOST:PORT --table=T --keys=KEYS --out=ROWS
//   cpp_peer push --coordinator=HOST:PORT --table=T --keys=KEYS --grads=GRADS
//   cpp_peer pull_dense --coordinator=HOST:PORT --name=N --size=FLOATS --out=VALUES
//   cpp_peer push_dense --coordinator=HOST:PORT --name=N --values=VALUES [--gradient]
//   cpp_peer plan --table=T --shard_to_server=S0,S1,... --max_keys=N --keys=KEYS --out=UNIQUE
//       the C++ client's plan of a call (client/internal/key_router.h): writes its unique keys to
//       UNIQUE and prints one line per request: "part SERVER SHARD:COUNT SHARD:COUNT ..."
//
// Exit status: 0 on success, 1 when the call failed (the status on stderr), 2 on a usage error.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "client/internal/key_router.h"
#include "client/ps_client.h"
#include "common/hash.h"

ABSL_FLAG(std::string, coordinator, "",
          "host:port, or several comma-separated: the job's coordinators");
ABSL_FLAG(std::string, table, "", "table of pull, push and plan");
ABSL_FLAG(std::string, keys, "", "file of uint64 keys");
ABSL_FLAG(std::string, grads, "", "push: file of float32 gradients");
ABSL_FLAG(std::string, out, "", "the file to write");
ABSL_FLAG(std::string, name, "", "dense tensor's name");
ABSL_FLAG(int64_t, size, 0, "pull_dense: floats of the tensor");
ABSL_FLAG(std::string, values, "", "push_dense: file of float32 values");
ABSL_FLAG(bool, gradient, false, "push_dense: the values are gradients (else assigned)");
ABSL_FLAG(std::string, shard_to_server, "", "plan: the server of each shard, comma-separated");
ABSL_FLAG(int, max_keys, 32768, "plan: most keys of one request");

namespace {

template <typename T>
bool ReadArray(const std::string& path, std::vector<T>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(T) != 0) return false;
  out->resize(bytes.size() / sizeof(T));
  std::memcpy(out->data(), bytes.data(), bytes.size());
  return true;
}

template <typename T>
bool WriteArray(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return static_cast<bool>(out);
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "cpp_peer: %s\n", status.ToString().c_str());
  return 1;
}

int Plan() {
  std::vector<uint64_t> keys;
  if (!ReadArray(absl::GetFlag(FLAGS_keys), &keys)) return Fail(absl::NotFoundError("keys"));
  std::vector<uint32_t> shard_to_server;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_shard_to_server), ',')) {
    uint32_t server = 0;
    if (!absl::SimpleAtoi(s, &server)) return Fail(absl::InvalidArgumentError("shard_to_server"));
    shard_to_server.push_back(server);
  }
  const ps::client_internal::KeyPlan plan =
      ps::client_internal::PlanKeys(keys, ps::NameHash(absl::GetFlag(FLAGS_table)), shard_to_server,
                                    absl::GetFlag(FLAGS_max_keys));
  for (const ps::client_internal::Part& part : plan.parts) {
    std::printf("part %u", part.server);
    for (const ps::client_internal::Segment& seg : part.segments) {
      std::printf(" %u:%u", seg.shard, seg.count);
    }
    std::printf("\n");
  }
  return WriteArray(absl::GetFlag(FLAGS_out), plan.unique) ? 0 : Fail(absl::InternalError("out"));
}

int Run(const std::string& command) {
  ps::ClientOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.connect_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<ps::Client>> client = ps::Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  if (command == "pull_dense" || command == "push_dense") {
    std::vector<float> values;
    if (command == "pull_dense") {
      values.resize(absl::GetFlag(FLAGS_size));
      const absl::Status s =
          (*client)->PullDense(absl::GetFlag(FLAGS_name), absl::MakeSpan(values));
      if (!s.ok()) return Fail(s);
      return WriteArray(absl::GetFlag(FLAGS_out), values) ? 0 : Fail(absl::InternalError("out"));
    }
    if (!ReadArray(absl::GetFlag(FLAGS_values), &values))
      return Fail(absl::NotFoundError("values"));
    const absl::Status s = (*client)->PushDense(
        absl::GetFlag(FLAGS_name), values,
        absl::GetFlag(FLAGS_gradient) ? ps::DenseUpdate::kGradient : ps::DenseUpdate::kAssign);
    return s.ok() ? 0 : Fail(s);
  }
  const std::string table = absl::GetFlag(FLAGS_table);
  absl::StatusOr<uint32_t> dim = (*client)->Dim(table);
  if (!dim.ok()) return Fail(dim.status());
  std::vector<uint64_t> keys;
  if (!ReadArray(absl::GetFlag(FLAGS_keys), &keys)) return Fail(absl::NotFoundError("keys"));
  if (command == "pull") {
    std::vector<float> rows(keys.size() * *dim);
    const absl::Status s = (*client)->Pull(table, keys, absl::MakeSpan(rows));
    if (!s.ok()) return Fail(s);
    return WriteArray(absl::GetFlag(FLAGS_out), rows) ? 0 : Fail(absl::InternalError("out"));
  }
  std::vector<float> grads;
  if (!ReadArray(absl::GetFlag(FLAGS_grads), &grads)) return Fail(absl::NotFoundError("grads"));
  const absl::Status s = (*client)->Push(table, keys, grads);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() == 2 ? args[1] : "";
  if (command == "plan") return Plan();
  if (command == "pull" || command == "push" || command == "pull_dense" ||
      command == "push_dense") {
    return Run(command);
  }
  std::fprintf(stderr, "usage: see client/python/testing/cpp_peer.cc\n");
  return 2;
}
