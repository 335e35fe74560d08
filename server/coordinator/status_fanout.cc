#include "server/coordinator/status_fanout.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc_status.h"
#include "server/hot_keys.h"

namespace ps {
namespace coordinator {
namespace {

// The replies of one gathering, filled in as the servers answer.
struct Gathering {
  absl::Mutex mu;
  rpc::ServerStatuses statuses ABSL_GUARDED_BY(mu);
  size_t pending ABSL_GUARDED_BY(mu) = 0;
  std::function<void(rpc::ServerStatuses)> done;
};

}  // namespace

StatusFanout::StatusFanout(AskFn ask, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : credentials_(std::move(credentials)),
      ask_(ask ? std::move(ask)
               : [this](const std::string& address, const rpc::ServerStatusRequest& request,
                        absl::Time deadline,
                        std::function<void(absl::StatusOr<rpc::ServerStatus>)> done) {
                   AskOverGrpc(address, request, deadline, std::move(done));
                 }) {}

absl::Time StatusFanout::Deadline(absl::Time now, absl::Time caller_deadline) {
  absl::Time deadline = now + kTimeout;
  if (caller_deadline < deadline) {
    const absl::Duration left = std::max(caller_deadline - now, absl::ZeroDuration());
    deadline = caller_deadline - std::min(left / 10, absl::Milliseconds(100));
  }
  return deadline;
}

absl::Status StatusFanout::Gather(const config::Job& job, const rpc::ShardMap& map,
                                  const rpc::ServerStatusesRequest& request, absl::Time deadline,
                                  std::function<void(rpc::ServerStatuses)> done) {
  const rpc::ServerStatusRequest& ask = request.request();
  if (!ask.hot_keys_table().empty()) {
    const bool known =
        std::any_of(job.tables().begin(), job.tables().end(),
                    [&](const config::Table& t) { return t.name() == ask.hot_keys_table(); });
    if (!known) {
      return absl::NotFoundError(
          absl::StrFormat("no table \"%s\" in job \"%s\"", ask.hot_keys_table(), job.name()));
    }
  }
  if (ask.hot_keys_k() > server::HotKeys::kDefaultCapacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hot_keys_k %d is above %d, the keys a server monitors per table and "
                        "direction",
                        ask.hot_keys_k(), server::HotKeys::kDefaultCapacity));
  }

  auto gathering = std::make_shared<Gathering>();
  gathering->done = std::move(done);
  std::vector<std::pair<int, std::string>> to_ask;  // reply index, address
  {
    absl::MutexLock lock(&gathering->mu);
    gathering->statuses.set_map_version(map.version());
    std::vector<const rpc::ServerInfo*> servers;
    for (const rpc::ServerInfo& s : map.servers()) servers.push_back(&s);
    std::sort(servers.begin(), servers.end(),
              [](const rpc::ServerInfo* a, const rpc::ServerInfo* b) {
                return a->server_id() < b->server_id();
              });
    for (const rpc::ServerInfo* s : servers) {
      rpc::ServerStatusReply* reply = gathering->statuses.add_servers();
      reply->set_server_id(s->server_id());
      reply->set_address(s->address());
      reply->set_alive(s->alive());
      if (!s->alive()) {
        reply->set_error(
            "not asked: the shard map marks it dead (it missed its heartbeats or could not be "
            "reached)");
        continue;
      }
      to_ask.emplace_back(gathering->statuses.servers_size() - 1, s->address());
    }
    // One more than the calls, taken back below: `done` runs once every call has answered and
    // this loop has sent them all.
    gathering->pending = to_ask.size() + 1;
  }
  auto finish_one = [gathering] {
    bool last = false;
    {
      absl::MutexLock lock(&gathering->mu);
      last = --gathering->pending == 0;
    }
    if (last) {
      rpc::ServerStatuses statuses;
      {
        absl::MutexLock lock(&gathering->mu);
        statuses = std::move(gathering->statuses);
      }
      gathering->done(std::move(statuses));
    }
  };
  for (const auto& [index, address] : to_ask) {
    ask_(address, ask, deadline,
         [gathering, index = index, finish_one](absl::StatusOr<rpc::ServerStatus> answer) {
           {
             absl::MutexLock lock(&gathering->mu);
             rpc::ServerStatusReply* reply = gathering->statuses.mutable_servers(index);
             if (answer.ok()) {
               *reply->mutable_status() = *std::move(answer);
             } else {
               reply->set_error(answer.status().ToString());
             }
           }
           finish_one();
         });
  }
  finish_one();
  return absl::OkStatus();
}

void StatusFanout::AskOverGrpc(const std::string& address, const rpc::ServerStatusRequest& request,
                               absl::Time deadline,
                               std::function<void(absl::StatusOr<rpc::ServerStatus>)> done) {
  std::shared_ptr<rpc::ParameterServer::Stub> stub;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<rpc::ParameterServer::Stub>& kept = stubs_[address];
    if (kept == nullptr) {
      // A server that comes back at its address is reached within a second, not after gRPC's
      // default backoff of up to two minutes.
      grpc_util::ChannelOptions options = grpc_util::StatusFanoutChannelOptions();
      options.credentials = credentials_;
      kept = rpc::ParameterServer::NewStub(grpc_util::NewChannel(address, options));
    }
    stub = kept;
  }
  struct Call {
    grpc::ClientContext context;
    rpc::ServerStatusRequest request;
    rpc::ServerStatus response;
    std::shared_ptr<rpc::ParameterServer::Stub> stub;  // kept alive for the call
  };
  auto* call = new Call;
  call->request = request;
  call->stub = stub;
  call->context.set_deadline(absl::ToChronoTime(deadline));
  stub->async()->GetStatus(&call->context, &call->request, &call->response,
                           [call, done = std::move(done)](grpc::Status status) {
                             absl::Status result = FromGrpcStatus(status);
                             if (result.ok()) {
                               done(std::move(call->response));
                             } else {
                               done(std::move(result));
                             }
                             delete call;
                           });
}

}  // namespace coordinator
}  // namespace ps
