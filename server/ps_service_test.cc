#include "server/ps_service.h"

#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/futex.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "common/shared_region_layout.h"
#include "server/admission.h"
#include "server/internal/test_fixtures.h"
#include "server/shared_regions.h"

namespace ps {
namespace server {
namespace {

using testing::EvenOddMap;
using testing::KeysOnShards;
using testing::TestJob;

// A PullRequest for `keys` of "emb", grouped into runs by shard.
rpc::PullRequest MakePull(const std::vector<uint64_t>& keys, uint64_t map_version) {
  rpc::PullRequest request;
  request.mutable_header()->set_map_version(map_version);
  request.set_table("emb");
  testing::SetKeys(keys, &request);
  return request;
}

// The service on an in-process server bound to port 0, called through the generated stub.
struct Served {
  Served() : service([](uint64_t) {}) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port != 0);
    channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    stub = rpc::ParameterServer::NewStub(channel);
  }
  ~Served() { server->Shutdown(); }

  grpc::Status Pull(const rpc::PullRequest& request, rpc::PullResponse* response) {
    grpc::ClientContext context;
    return stub->Pull(&context, request, response);
  }

  // Calls `method` of the service with `bytes` as the request, whatever they hold.
  grpc::Status CallRaw(const std::string& method, const std::string& bytes) {
    grpc::GenericStub generic(channel);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, "/ps.rpc.ParameterServer/" + method, grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    return status;
  }

  ParameterServerService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<rpc::ParameterServer::Stub> stub;
};

// A push of gradient 1 to `keys` of "emb" from `worker_id`, routed with map version 3.
rpc::PushRequest MakePush(const std::vector<uint64_t>& keys, uint32_t worker_id,
                          uint64_t sequence) {
  rpc::PushRequest request;
  request.mutable_header()->set_map_version(3);
  request.mutable_header()->set_worker_id(worker_id);
  request.mutable_header()->set_sequence(sequence);
  request.set_table("emb");
  testing::SetKeys(keys, &request);
  const std::vector<float> grads(keys.size() * 4, 1.0f);
  request.set_grads(
      std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)));
  return request;
}

TEST_CASE("the hand-framed pull response is the PullResponse the store writes",
          "[server][service]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());

  const int n = GENERATE(0, 1, 31, 5000);  // 5000 rows: a length of three varint bytes
  const rpc::PullRequest request = MakePull(KeysOnShards(0, n), 3);
  rpc::PullResponse got;
  const grpc::Status status = served.Pull(request, &got);
  INFO(status.error_message());
  REQUIRE(status.ok());
  rpc::PullResponse want;
  REQUIRE((*store)->Pull(request, &want).ok());
  CHECK(got.dim() == 4);
  CHECK(got.values().size() == size_t(n) * 4 * sizeof(float));
  CHECK(got.values() == want.values());
}

TEST_CASE("the raw pull keeps every error code", "[server][service]") {
  Served served;
  rpc::PullResponse response;
  // Before the store: retryable.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).error_code() ==
        grpc::StatusCode::UNAVAILABLE);

  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  served.service.SetStore(store->get());
  // Before the map: retryable.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 0), &response).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  (*store)->SetShardMap(EvenOddMap(3), 0);
  // Routed with a newer map than the server's.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 4), &response).error_code() ==
        grpc::StatusCode::UNAVAILABLE);

  rpc::PullRequest unknown = MakePull(KeysOnShards(0, 3), 3);
  unknown.set_table("nope");
  CHECK(served.Pull(unknown, &response).error_code() == grpc::StatusCode::NOT_FOUND);

  rpc::PullRequest torn = MakePull(KeysOnShards(0, 3), 3);
  torn.mutable_keys()->pop_back();
  CHECK(served.Pull(torn, &response).error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  const grpc::Status theirs = served.Pull(MakePull(KeysOnShards(1, 3), 3), &response);
  CHECK(theirs.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(absl::StrContains(theirs.error_message(), "shard map version 3"));

  // 70000 rows of 16 bytes are over the job's 1 MiB message limit.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 70000), 3), &response).error_code() ==
        grpc::StatusCode::RESOURCE_EXHAUSTED);

  // The server keeps serving.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).ok());
  CHECK(response.values().size() == 3 * 4 * sizeof(float));
}

TEST_CASE("writes from worker ids the coordinator never issued are refused PERMISSION_DENIED",
          "[server][service][registered_workers]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  // The coordinator has issued member ids 1 and 2.
  RegisteredWorkers workers([](auto done) {
    rpc::MemberIds ids;
    ids.set_first_member_id(1);
    ids.set_next_member_id(3);
    done(ids);
  });
  Served served;
  served.service.SetRegisteredWorkers(&workers);
  served.service.SetStore(store->get());
  const std::vector<uint64_t> keys = KeysOnShards(0, 5);

  rpc::PushResponse pushed;
  {
    grpc::ClientContext context;
    const grpc::Status status =
        served.stub->Push(&context, MakePush(keys, 4000000000u, 1), &pushed);
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(absl::StrContains(status.error_message(),
                            "worker_id 4000000000 was never registered with the coordinator"));
    CHECK(absl::StrContains(status.error_message(), "Coordinator.Register"));
  }
  {
    grpc::ClientContext context;
    CHECK(served.stub->Push(&context, MakePush(keys, 0, 1), &pushed).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext context;
    const grpc::Status status = served.stub->Push(&context, MakePush(keys, 2, 1), &pushed);
    INFO(status.error_message());
    CHECK(status.ok());
  }
  {  // Nothing of the refused pushes was applied: one SGD step of 0.5 from the initial rows.
    rpc::PullRequest pull = MakePull(keys, 3);
    pull.mutable_header()->set_worker_id(4000000000u);  // reads do not check it
    rpc::PullResponse rows;
    REQUIRE(served.Pull(pull, &rows).ok());
    auto fresh = ShardedStore::Create(TestJob(), {});
    REQUIRE(fresh.ok());
    (*fresh)->SetShardMap(EvenOddMap(3), 0);
    rpc::PullResponse initial;
    REQUIRE((*fresh)->Pull(pull, &initial).ok());
    const float* got = reinterpret_cast<const float*>(rows.values().data());
    const float* was = reinterpret_cast<const float*>(initial.values().data());
    for (size_t i = 0; i < keys.size() * 4; ++i) CHECK(got[i] == Approx(was[i] - 0.5f));
  }

  rpc::PushDenseRequest dense;
  dense.mutable_header()->set_map_version(3);
  dense.set_name("mlp");
  dense.set_total_floats(2);
  rpc::DenseChunk* chunk = dense.add_chunks();
  chunk->set_chunk(0);
  const float values[2] = {1, 2};
  chunk->set_values(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  // Where chunk 0 of "mlp" goes in EvenOddMap: this server serves only the even shards.
  const bool mine = ShardOf(NameHash("mlp"), 0, testing::kTestShards) % 2 == 0;
  rpc::PushDenseResponse dense_response;
  {  // An assignment without a worker id is accepted; with an unknown one it is refused.
    grpc::ClientContext context;
    const grpc::Status status = served.stub->PushDense(&context, dense, &dense_response);
    CHECK(status.error_code() ==
          (mine ? grpc::StatusCode::OK : grpc::StatusCode::FAILED_PRECONDITION));
    dense.mutable_header()->set_worker_id(77);
    grpc::ClientContext again;
    CHECK(served.stub->PushDense(&again, dense, &dense_response).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
  }
  {  // A gradient needs a registered worker.
    dense.set_kind(rpc::PushDenseRequest::GRADIENT);
    dense.mutable_header()->set_sequence(9);
    dense.mutable_header()->set_worker_id(0);
    grpc::ClientContext context;
    CHECK(served.stub->PushDense(&context, dense, &dense_response).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
  }

  rpc::EndStepRequest end;
  end.mutable_header()->set_map_version(3);
  end.mutable_header()->set_clock(0);
  rpc::EndStepResponse ended;
  {  // No worker id: not checked (and a no-op outside sync mode).
    grpc::ClientContext context;
    CHECK(served.stub->EndStep(&context, end, &ended).ok());
  }
  {
    end.mutable_header()->set_worker_id(3);  // the next id, not issued yet
    grpc::ClientContext context;
    const grpc::Status status = served.stub->EndStep(&context, end, &ended);
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(absl::StrContains(status.error_message(), "member ids 1 to 2"));
  }
}

TEST_CASE("a request that does not parse gets INVALID_ARGUMENT naming its message type",
          "[server][service]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());
  const std::string method = GENERATE("Pull", "Push", "PullDense", "PushDense", "EndStep");
  // Field 1 (the header, length-delimited) says 16 bytes follow; 3 do.
  // Split: "\x10abc" would be one (out-of-range) hex escape, and the literal 2 bytes long.
  const std::string truncated("\x0a\x10" "abc", 5);
  const grpc::Status status = served.CallRaw(method, truncated);
  INFO(method << ": " << status.error_message());
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StrContains(status.error_message(),
                          absl::StrCat("does not parse as a ps.rpc.", method, "Request")));

  // The server keeps serving.
  rpc::PullResponse response;
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).ok());
}

TEST_CASE("a table name that is not UTF-8 does not parse", "[server][service]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());
  // Field 2 (table, a proto3 string): 0xc3 0x28 is not UTF-8.
  const std::string table("\x12\x02\xc3\x28", 4);
  const grpc::Status status = served.CallRaw("Push", table);
  INFO(status.error_message());
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

// Sizes taken from the wire are checked against the bytes that came with them before anything is
// allocated for them: each request below claims far more than it carries.
TEST_CASE("requests claiming huge key counts or sizes are refused before any allocation",
          "[server][service]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());
  const uint32_t kMaxCount = 0xffffffffu;

  SECTION("a pull whose runs claim 2^33 keys with 3 keys' bytes") {
    rpc::PullRequest pull = MakePull(KeysOnShards(0, 3), 3);
    for (int i = 0; i < 2; ++i) {
      rpc::ShardRun* run = pull.add_runs();
      run->set_shard(0);
      run->set_count(kMaxCount);
    }
    rpc::PullResponse response;
    const grpc::Status status = served.Pull(pull, &response);
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(absl::StrContains(status.error_message(), "shard runs cover"));
  }
  SECTION("a push whose run claims 2^32 - 1 keys with 3 keys' bytes") {
    rpc::PushRequest push = MakePush(KeysOnShards(0, 3), 1, 1);
    push.mutable_runs(0)->set_count(kMaxCount);
    rpc::PushResponse response;
    grpc::ClientContext context;
    const grpc::Status status = served.stub->Push(&context, push, &response);
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("a push whose gradients disagree with keys x dim") {
    rpc::PushRequest push = MakePush(KeysOnShards(0, 3), 1, 1);
    push.mutable_grads()->append(4, '\0');  // one float more than 3 x 4
    rpc::PushResponse response;
    grpc::ClientContext context;
    const grpc::Status status = served.stub->Push(&context, push, &response);
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(absl::StrContains(status.error_message(), "gradients are"));
  }
  SECTION("a dense push claiming 2^40 floats with one float") {
    rpc::PushDenseRequest push;
    push.mutable_header()->set_map_version(3);
    push.set_kind(rpc::PushDenseRequest::ASSIGN);
    push.set_name("mlp");
    push.set_total_floats(uint64_t{1} << 40);
    rpc::DenseChunk* chunk = push.add_chunks();
    const float one = 1.0f;
    chunk->set_values(reinterpret_cast<const char*>(&one), sizeof(one));
    // Any chunk the server serves: find one of an even shard.
    const uint64_t name_hash = NameHash("mlp");
    uint32_t c = 0;
    while (ShardOf(name_hash, c, testing::kTestShards) % 2 != 0) ++c;
    chunk->set_chunk(c);
    rpc::PushDenseResponse response;
    grpc::ClientContext context;
    const grpc::Status status = served.stub->PushDense(&context, push, &response);
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("a keys field whose length prefix claims 2^40 bytes") {
    std::string bytes = "\x1a";  // field 3 (keys), length-delimited
    uint64_t length = uint64_t{1} << 40;
    while (length >= 0x80) {
      bytes.push_back(static_cast<char>(length | 0x80));
      length >>= 7;
    }
    bytes.push_back(static_cast<char>(length));
    bytes.append(24, 'k');
    const std::string method = GENERATE("Pull", "Push");
    const grpc::Status status = served.CallRaw(method, bytes);
    INFO(method << ": " << status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  // The server keeps serving.
  rpc::PullResponse response;
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).ok());
}

TEST_CASE("an admission limit refuses data-path calls RESOURCE_EXHAUSTED, not EndStep",
          "[server][service][admission]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  AdmissionLimits limits;
  limits.max_requests = 1;
  limits.max_requests_per_peer = 1;
  Admission admission(limits);
  Served served;
  served.service.SetStore(store->get());
  served.service.SetAdmission(&admission);
  rpc::PullResponse response;
  REQUIRE(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).ok());

  // Another peer's request holds the server's only slot.
  absl::StatusOr<Admission::Ticket> held = admission.Admit("ipv4:10.0.0.1:1", 0);
  REQUIRE(held.ok());
  const grpc::Status pull = served.Pull(MakePull(KeysOnShards(0, 3), 3), &response);
  CHECK(pull.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(absl::StrContains(pull.error_message(), "(--max_inflight_requests=1)"));
  const std::string method = GENERATE("Push", "PullDense", "PushDense");
  const grpc::Status raw = served.CallRaw(method, "");
  INFO(method << ": " << raw.error_message());
  CHECK(raw.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  // EndStep is exempt (an empty request: worker 0, clock 0, async mode).
  CHECK(served.CallRaw("EndStep", "").error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED);

  held->Release();
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).ok());
}

// Moves the keys (and a push's gradients) of `request` into slot `slot` of `lent`, which this
// process can reach through `regions`, and names the slot instead.
template <typename Request>
void MoveToSlot(SharedRegions& regions, const rpc::OpenSharedRegionResponse& lent, uint32_t slot,
                Request* request) {
  rpc::SharedSlot shared;
  shared.set_region(lent.region());
  shared.set_secret(lent.secret());
  shared.set_slot(slot);
  shared.set_keys_bytes(request->keys().size());
  std::string payload = request->keys();
  if constexpr (std::is_same_v<Request, rpc::PushRequest>) {
    shared.set_grads_bytes(request->grads().size());
    payload += request->grads();
    request->clear_grads();
  }
  const auto at = regions.Find(shared);
  REQUIRE(at.ok());
  REQUIRE(payload.size() <= at->size());
  std::memcpy(at->data(), payload.data(), payload.size());
  request->clear_keys();
  *request->mutable_shared() = shared;
}

// A region of 2 slots of 64 KiB, lent by `served` through the RPC.
rpc::OpenSharedRegionResponse OpenRegion(Served& served) {
  rpc::OpenSharedRegionRequest asked;
  asked.set_slots(2);
  asked.set_slot_bytes(1 << 16);
  rpc::OpenSharedRegionResponse lent;
  grpc::ClientContext context;
  const grpc::Status opened = served.stub->OpenSharedRegion(&context, asked, &lent);
  INFO(opened.error_message());
  REQUIRE(opened.ok());
  return lent;
}

TEST_CASE("pulls and pushes carried in a lent slot", "[server][service][shared]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());
  SharedRegions::Options options;
  options.max_bytes = 64 << 20;
  SharedRegions regions(options);
  served.service.SetSharedRegions(&regions);

  const rpc::OpenSharedRegionResponse lent = OpenRegion(served);
  CHECK(regions.regions() == 1);
  const std::vector<uint64_t> keys = KeysOnShards(0, 300);

  // A pull: the rows land in the slot, the response says so.
  rpc::PullRequest pull = MakePull(keys, 3);
  rpc::PullResponse want;
  REQUIRE((*store)->Pull(pull, &want).ok());
  MoveToSlot(regions, lent, 0, &pull);
  rpc::PullResponse got;
  grpc::Status status = served.Pull(pull, &got);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(got.values_in_slot());
  CHECK(got.dim() == 4);
  CHECK(got.values().empty());
  const auto slot0 = regions.Find(pull.shared());
  REQUIRE(slot0.ok());
  CHECK(std::string(reinterpret_cast<const char*>(slot0->data()), want.values().size()) ==
        want.values());

  // A push: applied as if it came in the message (sgd, lr 0.5, gradient 1).
  rpc::PushRequest push = MakePush(keys, 1, 1);
  MoveToSlot(regions, lent, 1, &push);
  rpc::PushResponse pushed;
  {
    grpc::ClientContext context;
    status = served.stub->Push(&context, push, &pushed);
    INFO(status.error_message());
    REQUIRE(status.ok());
  }
  rpc::PullResponse after;
  REQUIRE((*store)->Pull(MakePull(keys, 3), &after).ok());
  std::vector<float> before_rows(keys.size() * 4);
  std::vector<float> after_rows(keys.size() * 4);
  std::memcpy(before_rows.data(), want.values().data(), want.values().size());
  std::memcpy(after_rows.data(), after.values().data(), after.values().size());
  for (size_t i = 0; i < after_rows.size(); ++i) {
    CHECK(after_rows[i] == Approx(before_rows[i] - 0.5f));
  }

  // Refusals, each before anything is applied.
  auto pull_code = [&](const rpc::PullRequest& request) {
    rpc::PullResponse response;
    return served.Pull(request, &response).error_code();
  };
  rpc::PullRequest wrong = pull;
  wrong.mutable_shared()->mutable_secret()->front() ^= 1;
  CHECK(pull_code(wrong) == grpc::StatusCode::PERMISSION_DENIED);
  wrong = pull;
  wrong.mutable_shared()->set_region(lent.region() + 1);
  CHECK(pull_code(wrong) == grpc::StatusCode::FAILED_PRECONDITION);
  wrong = pull;
  wrong.mutable_shared()->set_slot(2);
  CHECK(pull_code(wrong) == grpc::StatusCode::INVALID_ARGUMENT);
  wrong = pull;
  wrong.mutable_shared()->set_keys_bytes(lent.slot_bytes() + 8);
  CHECK(pull_code(wrong) == grpc::StatusCode::INVALID_ARGUMENT);
  wrong = pull;
  wrong.set_keys(std::string(8, '\0'));  // keys in both places
  CHECK(pull_code(wrong) == grpc::StatusCode::INVALID_ARGUMENT);
  wrong = pull;
  wrong.mutable_shared()->set_grads_bytes(16);
  CHECK(pull_code(wrong) == grpc::StatusCode::INVALID_ARGUMENT);
  {  // Rows that do not fit the slot: 5000 keys of dim 4 are 80000 bytes.
    rpc::PullRequest big = MakePull(KeysOnShards(0, 5000), 3);
    MoveToSlot(regions, lent, 0, &big);
    rpc::PullResponse response;
    const grpc::Status refused = served.Pull(big, &response);
    CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(absl::StrContains(refused.error_message(), "do not fit"));
  }

  // Given back, the region is gone for requests.
  rpc::CloseSharedRegionRequest close;
  close.set_region(lent.region());
  close.set_secret(lent.secret());
  rpc::CloseSharedRegionResponse closed;
  {
    grpc::ClientContext context;
    REQUIRE(served.stub->CloseSharedRegion(&context, close, &closed).ok());
  }
  CHECK(regions.regions() == 0);
  CHECK(pull_code(pull) == grpc::StatusCode::FAILED_PRECONDITION);
}

// Makes a call in slot `slot` of a region mapped at `base`, as a client on this host does, and
// waits for its answer: its code and bytes.
// `keys`: the page's hint (SharedRegions::kPoolKeys or more: served by the regions' pool).
std::pair<int32_t, std::string> CallInRegion(unsigned char* base, uint32_t slot, uint32_t method,
                                             const std::string& request, uint32_t keys = 0) {
  auto* page = reinterpret_cast<SharedCallPage*>(base + kSharedPageBytes * (1 + slot));
  REQUIRE(request.size() <= sizeof(page->data));
  std::memcpy(page->data, request.data(), request.size());
  page->method = method;
  page->request_bytes = static_cast<uint32_t>(request.size());
  page->keys = keys;
  auto* client_bell = reinterpret_cast<uint32_t*>(base + kClientBellOffset);
  StoreWord(&page->state, kSharedCallRequested);
  RingBell(reinterpret_cast<uint32_t*>(base + kServerBellOffset));
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (LoadWord(&page->state) != kSharedCallAnswered) {
    REQUIRE(absl::Now() < give_up);
    FutexWait(client_bell, LoadWord(client_bell), absl::Milliseconds(10));
  }
  StoreWord(&page->state, kSharedCallIdle);
  return {page->code, std::string(page->data, page->answer_bytes)};
}

TEST_CASE("pulls and pushes made in a lent region are served as the RPCs",
          "[server][service][shared]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());
  SharedRegions::Options options;
  options.max_bytes = 64 << 20;
  options.serve_call = [&served](SharedRegions::Call call) {
    served.service.ServeSharedCall(std::move(call));
  };
  SharedRegions regions(options);
  served.service.SetSharedRegions(&regions);
  const rpc::OpenSharedRegionResponse lent = OpenRegion(served);
  REQUIRE(lent.calls());
  const absl::StatusOr<unsigned char*> mapped = testing::MapLentRegion(lent);
  INFO(mapped.status().ToString());
  REQUIRE(mapped.ok());
  unsigned char* base = *mapped;
  const std::vector<uint64_t> keys = KeysOnShards(0, 300);

  // A pull: the rows land in the slot.
  rpc::PullRequest pull = MakePull(keys, 3);
  rpc::PullResponse want;
  REQUIRE((*store)->Pull(pull, &want).ok());
  MoveToSlot(regions, lent, 0, &pull);
  auto [code, answer] = CallInRegion(base, 0, kSharedCallPull, pull.SerializeAsString());
  INFO(answer);
  REQUIRE(code == 0);
  rpc::PullResponse said;
  REQUIRE(said.ParseFromString(answer));
  CHECK(said.values_in_slot());
  CHECK(said.dim() == 4);
  unsigned char* slot0 = base + lent.header_bytes();
  CHECK(std::string(reinterpret_cast<const char*>(slot0), want.values().size()) == want.values());

  // A push: applied (sgd, lr 0.5, gradient 1); said to be large, so served by the pool.
  rpc::PushRequest push = MakePush(keys, 1, 1);
  MoveToSlot(regions, lent, 1, &push);
  std::tie(code, answer) =
      CallInRegion(base, 1, kSharedCallPush, push.SerializeAsString(), SharedRegions::kPoolKeys);
  REQUIRE(code == 0);
  rpc::PullResponse after;
  REQUIRE((*store)->Pull(MakePull(keys, 3), &after).ok());
  float before_row = 0;
  float after_row = 0;
  std::memcpy(&before_row, want.values().data(), sizeof(float));
  std::memcpy(&after_row, after.values().data(), sizeof(float));
  CHECK(after_row == Approx(before_row - 0.5f));

  // Refusals: a payload in another slot than the call's, none at all, an unknown method, bytes
  // that do not parse, and a wrong secret.
  std::tie(code, answer) =
      CallInRegion(base, 1, kSharedCallPull, pull.SerializeAsString());  // slot 0's
  CHECK(code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK(absl::StrContains(answer, "must name that slot"));
  std::tie(code, answer) =
      CallInRegion(base, 0, kSharedCallPull, MakePull(keys, 3).SerializeAsString());
  CHECK(code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  std::tie(code, answer) = CallInRegion(base, 0, 7, pull.SerializeAsString());
  CHECK(code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK(absl::StrContains(answer, "method 7"));
  // Field 1 (the header) length-delimited, holding a tag of wire type 7, which is none.
  std::tie(code, answer) = CallInRegion(base, 1, kSharedCallPush, std::string("\x0a\x01\x0f", 3));
  CHECK(code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  rpc::PullRequest wrong = pull;
  wrong.mutable_shared()->mutable_secret()->front() ^= 1;
  std::tie(code, answer) = CallInRegion(base, 0, kSharedCallPull, wrong.SerializeAsString());
  CHECK(code == static_cast<int32_t>(absl::StatusCode::kPermissionDenied));
  munmap(base, testing::LentRegionBytes(lent));
}

TEST_CASE("a service that lends no shared memory refuses slots", "[server][service][shared]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());
  rpc::OpenSharedRegionRequest open;
  open.set_slots(1);
  open.set_slot_bytes(4096);
  rpc::OpenSharedRegionResponse lent;
  grpc::ClientContext context;
  CHECK(served.stub->OpenSharedRegion(&context, open, &lent).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  rpc::PullRequest pull = MakePull(KeysOnShards(0, 3), 3);
  pull.clear_keys();
  pull.mutable_shared()->set_region(1);
  pull.mutable_shared()->set_keys_bytes(24);
  rpc::PullResponse response;
  const grpc::Status refused = served.Pull(pull, &response);
  CHECK(refused.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(absl::StrContains(refused.error_message(), "shared region"));
}

}  // namespace
}  // namespace server
}  // namespace ps
