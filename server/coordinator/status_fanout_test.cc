#include "server/coordinator/status_fanout.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/job_config.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/ports.h"

namespace ps {
namespace coordinator {
namespace {

config::Job TestJob() {
  absl::StatusOr<config::Job> job = ParseJob(R"pb(name: "fanout"
                                                  tables { name: "emb" dim: 4 }
                                                  cluster { num_servers: 3 num_workers: 1 })pb",
                                             "job.pbtxt");
  REQUIRE(job.ok());
  return *job;
}

rpc::ShardMap Map(const std::vector<std::string>& addresses, const std::vector<bool>& alive) {
  rpc::ShardMap map;
  map.set_version(7);
  // Listed out of order: the replies come in server_id order.
  for (int i = static_cast<int>(addresses.size()) - 1; i >= 0; --i) {
    rpc::ServerInfo* s = map.add_servers();
    s->set_server_id(i);
    s->set_address(addresses[i]);
    s->set_alive(alive[i]);
  }
  return map;
}

// Waits for the gathering's answer.
struct Answer {
  absl::Notification done;
  rpc::ServerStatuses statuses;
  // How many times the callback ran: the test checks it is once, on its own thread (Catch2 is
  // not thread-safe, and the callback may run on the fanout's).
  std::atomic<int> calls{0};
  std::function<void(rpc::ServerStatuses)> Callback() {
    return [this](rpc::ServerStatuses s) {
      if (calls.fetch_add(1) > 0) return;
      statuses = std::move(s);
      done.Notify();
    };
  }
};

TEST_CASE("the gathering waits 2 s, or less when the caller's deadline is sooner",
          "[coordinator][fanout]") {
  const absl::Time now = absl::FromUnixSeconds(1000);
  CHECK(StatusFanout::Deadline(now, absl::InfiniteFuture()) == now + absl::Seconds(2));
  CHECK(StatusFanout::Deadline(now, now + absl::Seconds(10)) == now + absl::Seconds(2));
  // A tenth of the time left, at most 100 ms, is kept for the reply.
  CHECK(StatusFanout::Deadline(now, now + absl::Milliseconds(500)) ==
        now + absl::Milliseconds(450));
  CHECK(StatusFanout::Deadline(now, now + absl::Milliseconds(1900)) ==
        now + absl::Milliseconds(1800));
  CHECK(StatusFanout::Deadline(now, now - absl::Seconds(1)) == now - absl::Seconds(1));
}

TEST_CASE("every live server is asked with the request; the answers and errors come by server id",
          "[coordinator][fanout]") {
  const bool answer_at_once = GENERATE(true, false);
  INFO((answer_at_once ? "answers within the call" : "answers from other threads"));
  std::vector<std::string> asked;
  std::vector<std::thread> threads;
  absl::Mutex mu;
  StatusFanout fanout([&](const std::string& address, const rpc::ServerStatusRequest& request,
                          absl::Time deadline,
                          std::function<void(absl::StatusOr<rpc::ServerStatus>)> done) {
    {
      absl::MutexLock lock(&mu);
      asked.push_back(address);
    }
    CHECK(request.hot_keys_table() == "emb");
    CHECK(request.hot_keys_k() == 5);
    auto answer = [address, done = std::move(done)] {
      if (address == "b:2") {
        done(absl::UnavailableError("connection refused"));
        return;
      }
      rpc::ServerStatus status;
      status.set_server_id(address == "a:1" ? 0 : 3);
      done(status);
    };
    if (answer_at_once) {
      answer();
    } else {
      absl::MutexLock lock(&mu);
      threads.emplace_back(answer);
    }
  });
  rpc::ServerStatusesRequest request;
  request.mutable_request()->set_hot_keys_table("emb");
  request.mutable_request()->set_hot_keys_k(5);
  Answer answer;
  REQUIRE(fanout
              .Gather(TestJob(), Map({"a:1", "b:2", "c:3", "d:4"}, {true, true, false, true}),
                      request, absl::Now() + absl::Seconds(2), answer.Callback())
              .ok());
  answer.done.WaitForNotification();
  for (auto& t : threads) t.join();
  CHECK(answer.calls == 1);
  CHECK(asked.size() == 3);  // not the dead one
  const rpc::ServerStatuses& s = answer.statuses;
  CHECK(s.map_version() == 7);
  REQUIRE(s.servers_size() == 4);
  CHECK(s.servers(0).server_id() == 0);
  CHECK(s.servers(0).address() == "a:1");
  CHECK(s.servers(0).has_status());
  CHECK(s.servers(0).error().empty());
  CHECK(s.servers(1).server_id() == 1);
  CHECK_FALSE(s.servers(1).has_status());
  CHECK(s.servers(1).error() == "UNAVAILABLE: connection refused");
  CHECK(s.servers(2).server_id() == 2);
  CHECK_FALSE(s.servers(2).alive());
  CHECK_FALSE(s.servers(2).has_status());
  CHECK_THAT(s.servers(2).error(), Catch::Contains("not asked: the shard map marks it dead"));
  CHECK(s.servers(3).has_status());
  CHECK(s.servers(3).status().server_id() == 3);
}

TEST_CASE("no servers (no map yet): answered at once, empty", "[coordinator][fanout]") {
  StatusFanout fanout(
      [](const std::string&, const rpc::ServerStatusRequest&, absl::Time,
         std::function<void(absl::StatusOr<rpc::ServerStatus>)>) { FAIL("nobody to ask"); });
  Answer answer;
  REQUIRE(fanout
              .Gather(TestJob(), rpc::ShardMap(), rpc::ServerStatusesRequest(),
                      absl::Now() + absl::Seconds(1), answer.Callback())
              .ok());
  REQUIRE(answer.done.HasBeenNotified());
  CHECK(answer.calls == 1);
  CHECK(answer.statuses.servers_size() == 0);
  CHECK(answer.statuses.map_version() == 0);
}

TEST_CASE("a bad hot-keys request is refused before any server is asked", "[coordinator][fanout]") {
  StatusFanout fanout(
      [](const std::string&, const rpc::ServerStatusRequest&, absl::Time,
         std::function<void(absl::StatusOr<rpc::ServerStatus>)>) { FAIL("no server is asked"); });
  rpc::ServerStatusesRequest request;
  request.mutable_request()->set_hot_keys_table("nope");
  const rpc::ShardMap map = Map({"a:1"}, {true});
  const absl::Status unknown = fanout.Gather(TestJob(), map, request, absl::Now(),
                                             [](rpc::ServerStatuses) { FAIL("not answered"); });
  CHECK(unknown.code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(unknown.message()), Catch::Contains("no table \"nope\""));
  request.mutable_request()->set_hot_keys_table("emb");
  request.mutable_request()->set_hot_keys_k(257);
  CHECK(fanout
            .Gather(TestJob(), map, request, absl::Now(),
                    [](rpc::ServerStatuses) { FAIL("not answered"); })
            .code() == absl::StatusCode::kInvalidArgument);
}

// A ParameterServer whose GetStatus answers with its id, or (`hold`) keeps the call until Release.
class FakeServer final : public rpc::ParameterServer::CallbackService {
 public:
  FakeServer(uint32_t id, bool hold) : id_(id), hold_(hold) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~FakeServer() override {
    Release();
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const rpc::ServerStatusRequest* request,
                                      rpc::ServerStatus* response) override {
    response->set_server_id(id_);
    response->set_hot_keys_table(request->hot_keys_table());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!hold_) {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    absl::MutexLock lock(&mu_);
    held_.push_back(reactor);
    return reactor;
  }

  void Release() {
    absl::MutexLock lock(&mu_);
    for (grpc::ServerUnaryReactor* r : held_) r->Finish(grpc::Status::OK);
    held_.clear();
  }

 private:
  const uint32_t id_;
  const bool hold_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<grpc::ServerUnaryReactor*> held_;
};

TEST_CASE("over gRPC: a server that answers, one that refuses and one that hangs past the deadline",
          "[coordinator][fanout]") {
  FakeServer answering(0, /*hold=*/false);
  testing::RefusingPort refusing;
  FakeServer hanging(2, /*hold=*/true);
  StatusFanout fanout;
  rpc::ServerStatusesRequest request;
  request.mutable_request()->set_hot_keys_table("emb");
  const rpc::ShardMap map =
      Map({answering.address(), refusing.address(), hanging.address()}, {true, true, true});
  for (int round = 0; round < 2; ++round) {  // the second round on the channels kept
    INFO("round " << round);
    Answer answer;
    const absl::Time start = absl::Now();
    REQUIRE(fanout
                .Gather(TestJob(), map, request,
                        StatusFanout::Deadline(start, start + absl::Milliseconds(800)),
                        answer.Callback())
                .ok());
    answer.done.WaitForNotification();
    const absl::Duration took = absl::Now() - start;
    hanging.Release();
    CHECK(answer.calls == 1);
    CHECK(took < absl::Seconds(5));  // the deadline (720 ms) with a generous margin
    const rpc::ServerStatuses& s = answer.statuses;
    REQUIRE(s.servers_size() == 3);
    REQUIRE(s.servers(0).has_status());
    CHECK(s.servers(0).status().server_id() == 0);
    CHECK(s.servers(0).status().hot_keys_table() == "emb");
    CHECK_FALSE(s.servers(1).has_status());
    CHECK_THAT(s.servers(1).error(), Catch::StartsWith("UNAVAILABLE: "));
    CHECK_FALSE(s.servers(2).has_status());
    CHECK_THAT(s.servers(2).error(), Catch::StartsWith("DEADLINE_EXCEEDED: "));
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace ps
