// libFuzzer target: the coordinator's domain object (server/coordinator/coordinator.h) driven by a
// sequence of decoded requests, as CoordinatorService calls it. Each step takes an opcode and a
// length-prefixed serialized request (Register, Heartbeat, Leave, ReportClock, KvSet, KvGet,
// ReportFailure, GetShardMap, WaitClock, KvWait) or advances the fake clock and sweeps. Bad
// input must give an error status, never a crash; the answers must stay consistent.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/fake_clock.h"

namespace {

using ps::coordinator::Coordinator;
using ps::coordinator::FakeClock;

const ps::config::Job& FuzzJob() {
  static const ps::config::Job* const job = [] {
    absl::StatusOr<ps::config::Job> parsed = ps::ParseJob(
        R"pb(name: "fuzz"
             tables { name: "emb" dim: 4 }
             training { mode: SYNC }
             cluster { num_servers: 2 num_workers: 2 num_shards: 8 replication_factor: 2 })pb",
        "fuzz.pbtxt");
    if (!parsed.ok()) {  // a broken fixture, not a finding
      std::fprintf(stderr, "FuzzJob: %s\n", parsed.status().ToString().c_str());
      std::abort();
    }
    return new ps::config::Job(*parsed);
  }();
  return *job;
}

template <typename Request>
bool Next(FuzzedDataProvider& in, Request* request) {
  const std::string bytes = in.ConsumeRandomLengthString(256);
  return request->ParseFromString(bytes);
}

}  // namespace

// Protobuf logs every string field of invalid UTF-8 it parses: silenced, it would be most of the
// run's time and output.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  FakeClock clock;
  ps::coordinator::CoordinatorOptions options;
  options.job = FuzzJob();
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<Coordinator>> created = Coordinator::Create(std::move(options));
  if (!created.ok()) std::abort();
  Coordinator& c = **created;
  std::vector<ps::coordinator::WaitId> waits;

  for (int steps = 0; steps < 64 && in.remaining_bytes() > 0; ++steps) {
    switch (in.ConsumeIntegralInRange<int>(0, 10)) {
      case 0: {
        ps::rpc::RegisterRequest r;
        if (Next(in, &r)) c.Register(r.role(), r.address(), r.rank()).status().IgnoreError();
        break;
      }
      case 1: {
        ps::rpc::HeartbeatRequest r;
        if (!Next(in, &r)) break;
        const std::vector<ps::rpc::ShardProgress> shards(r.shards().begin(), r.shards().end());
        std::optional<ps::rpc::JobFailure> failure;
        c.Heartbeat(r.member_id(), shards, &failure).status().IgnoreError();
        break;
      }
      case 2: {
        ps::rpc::LeaveRequest r;
        if (Next(in, &r)) c.Leave(r.member_id()).IgnoreError();
        break;
      }
      case 3: {
        ps::rpc::ReportClockRequest r;
        if (Next(in, &r)) c.ReportClock(r.member_id(), r.clock()).status().IgnoreError();
        break;
      }
      case 4: {
        ps::rpc::KvSetRequest r;
        if (Next(in, &r)) c.KvSet(r.key(), r.value()).IgnoreError();
        break;
      }
      case 5: {
        ps::rpc::KvGetRequest r;
        if (!Next(in, &r)) break;
        const std::vector<std::string> keys(r.keys().begin(), r.keys().end());
        c.KvGet(keys).status().IgnoreError();
        waits.push_back(c.AsyncKvWait(keys, c.Now() + absl::Milliseconds(r.timeout_ms()),
                                      [](absl::StatusOr<std::vector<std::string>>) {}));
        break;
      }
      case 6: {
        ps::rpc::ReportFailureRequest r;
        if (!Next(in, &r)) break;
        if (r.reporter_failed()) {
          c.ReportWorkerFailure(r.reporter(), r.reason()).IgnoreError();
        } else if (c.AddressToCheck(r.server_id()).has_value()) {
          c.DeclareDead(r.server_id());
        }
        break;
      }
      case 7: {
        ps::rpc::GetShardMapRequest r;
        if (!Next(in, &r)) break;
        waits.push_back(c.AsyncGetShardMap(r.min_version(), c.Now() + absl::Seconds(1),
                                           [](absl::StatusOr<ps::rpc::ShardMap>) {}));
        break;
      }
      case 8: {
        ps::rpc::WaitClockRequest r;
        if (!Next(in, &r)) break;
        waits.push_back(c.AsyncWaitClock(r.clock(), c.Now() + absl::Seconds(1),
                                         [](absl::StatusOr<ps::rpc::ClockState>) {}));
        break;
      }
      case 9:
        clock.Advance(absl::Milliseconds(in.ConsumeIntegralInRange<int>(0, 5000)));
        c.Sweep();
        break;
      case 10:
        c.Status();
        c.Clocks();
        c.MemberIds();
        break;
    }
  }
  for (ps::coordinator::WaitId id : waits) c.CancelWait(id);
  return 0;
}
