#include "common/grpc/channel_factory.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <limits>

namespace ps {
namespace grpc_util {
namespace {

constexpr int kCoordinatorMaxMessageBytes = 256 << 20;

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

// gRPC takes the minimum reconnect backoff as the shortest time a connection attempt is given,
// too: at 100 ms, the first TLS handshake of a process on a busy machine (certificates parsed,
// keys checked) did not finish, and the call failed UNAVAILABLE.
constexpr absl::Duration kMinConnectTimeout = absl::Seconds(5);

}  // namespace

ChannelOptions ClientDataChannelOptions() {
  ChannelOptions options;
  options.max_send_message_bytes = std::numeric_limits<int>::max();
  options.max_receive_message_bytes = std::numeric_limits<int>::max();
  options.local_subchannel_pool = true;
  options.http2_stream_lookahead_bytes = 64 << 20;
  options.http2_write_buffer_bytes = 8 << 20;
  return options;
}

ChannelOptions ReplicationChannelOptions() {
  ChannelOptions options;
  options.max_send_message_bytes = std::numeric_limits<int>::max();
  options.max_receive_message_bytes = std::numeric_limits<int>::max();
  options.initial_reconnect_backoff = absl::Milliseconds(50);
  options.max_reconnect_backoff = absl::Milliseconds(500);
  // Batches are megabytes: large windows and write buffers, as the client library uses.
  options.http2_stream_lookahead_bytes = 64 << 20;
  options.http2_write_buffer_bytes = 8 << 20;
  return options;
}

ChannelOptions CoordinatorChannelOptions() {
  ChannelOptions options;
  options.max_send_message_bytes = kCoordinatorMaxMessageBytes;
  options.max_receive_message_bytes = kCoordinatorMaxMessageBytes;
  // A coordinator that restarts is back within seconds: reconnect soon, not after gRPC's default
  // backoff of up to two minutes.
  options.initial_reconnect_backoff = absl::Milliseconds(100);
  options.min_reconnect_backoff = kMinConnectTimeout;
  options.max_reconnect_backoff = absl::Milliseconds(1000);
  return options;
}

ChannelOptions StatusFanoutChannelOptions() {
  ChannelOptions options;
  // A server that comes back at its address is reached within a second.
  options.initial_reconnect_backoff = absl::Milliseconds(100);
  options.min_reconnect_backoff = kMinConnectTimeout;
  options.max_reconnect_backoff = absl::Milliseconds(1000);
  return options;
}

ChannelOptions CtlChannelOptions() {
  ChannelOptions options;
  options.max_receive_message_bytes = kCoordinatorMaxMessageBytes;
  return options;
}

ChannelOptions CheckpointChannelOptions() { return ChannelOptions(); }

grpc::ChannelArguments ToChannelArguments(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  if (options.max_send_message_bytes >= 0) {
    args.SetMaxSendMessageSize(options.max_send_message_bytes);
  }
  if (options.max_receive_message_bytes >= 0) {
    args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  }
  if (options.initial_reconnect_backoff > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Millis(options.initial_reconnect_backoff));
  }
  if (options.min_reconnect_backoff > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, Millis(options.min_reconnect_backoff));
  }
  if (options.max_reconnect_backoff > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(options.max_reconnect_backoff));
  }
  if (options.http2_stream_lookahead_bytes > 0) {
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.http2_stream_lookahead_bytes);
  }
  if (options.http2_write_buffer_bytes > 0) {
    args.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, options.http2_write_buffer_bytes);
  }
  if (options.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive_time));
  }
  if (options.local_subchannel_pool) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (const auto& [key, value] : options.int_args) args.SetInt(key, value);
  return args;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const ChannelOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(address, credentials, ToChannelArguments(options));
}

}  // namespace grpc_util
}  // namespace ps
