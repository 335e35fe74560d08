#include "client/internal/channel_transport.h"

#include <utility>

#include "client/internal/sparse_wire.h"
#include "common/grpc/channel_factory.h"

namespace ps {
namespace client_internal {
namespace {

// Pull and Push go through the generic stub with messages built in place; their method names.
constexpr char kPullMethod[] = "/ps.rpc.ParameterServer/Pull";
constexpr char kPushMethod[] = "/ps.rpc.ParameterServer/Push";
// Fields of PullRequest and PushRequest (proto/ps.proto) written in place.
constexpr uint32_t kKeysField = 3;
constexpr uint32_t kGradsField = 5;

}  // namespace

ChannelTransport::ChannelTransport(std::string address, int channels,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials)
    : address_(std::move(address)) {
  for (int i = 0; i < std::max(1, channels); ++i) {
    // A connection of its own per channel, not one shared subchannel.
    grpc_util::ChannelOptions options = grpc_util::ClientDataChannelOptions();
    options.int_args.emplace_back("ps.channel_index", i);
    options.credentials = credentials;
    std::shared_ptr<grpc::Channel> channel = grpc_util::NewChannel(address_, options);
    stubs_.push_back(rpc::ParameterServer::NewStub(channel));
    generic_stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
}

void ChannelTransport::Start(Exchange* exchange) {
  if (exchange->slot >= 0) {
    // The payload is in the slot that `fields.shared` names.
    MessageWriter writer(exchange->fields.ByteSizeLong());
    writer.AppendMessage(exchange->fields);
    exchange->request_bytes = writer.Finish();
  } else {
    MessageWriter writer(exchange->fields.ByteSizeLong() +
                         2 * MessageWriter::kFieldOverheadBytes + exchange->key_bytes +
                         exchange->grad_bytes);
    writer.AppendMessage(exchange->fields);
    char* keys_out = writer.AppendBytesField(kKeysField, exchange->key_bytes);
    char* grads_out =
        exchange->push ? writer.AppendBytesField(kGradsField, exchange->grad_bytes) : nullptr;
    exchange->WritePayload(keys_out, grads_out);
    exchange->request_bytes = writer.Finish();
  }
  exchange->context = std::make_unique<grpc::ClientContext>();
  exchange->context->set_deadline(absl::ToChronoTime(exchange->deadline));
  grpc::GenericStub* stub =
      generic_stubs_[next_.fetch_add(1, std::memory_order_relaxed) % generic_stubs_.size()].get();
  stub->UnaryCall(exchange->context.get(), exchange->push ? kPushMethod : kPullMethod,
                  grpc::StubOptions(), &exchange->request_bytes, &exchange->response_bytes,
                  [exchange](grpc::Status status) { exchange->OnDone(status); });
}

}  // namespace client_internal
}  // namespace ps
