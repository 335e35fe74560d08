// The one way every role of the project makes a gRPC channel: the options each role sets (message
// limits, reconnect backoff, HTTP/2 windows, keepalive) and the credentials, in one struct, so that
// no caller builds a channel by hand.
#ifndef PS_COMMON_GRPC_CHANNEL_FACTORY_H_
#define PS_COMMON_GRPC_CHANNEL_FACTORY_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace ps {
namespace grpc_util {

// What a channel to one address is made with. A field at its default leaves gRPC's own default in
// place (and sets no channel argument, so that channels that agree share gRPC's subchannels as
// before).
struct ChannelOptions {
  // Largest message sent / received, in bytes. Default -1: gRPC's default (no limit on sending,
  // 4 MiB on receiving). Otherwise >= 0.
  int max_send_message_bytes = -1;
  int max_receive_message_bytes = -1;

  // Reconnect backoff after a failed connection attempt. Default zero: gRPC's default (1 s at
  // first, up to 120 s). Otherwise positive; whole milliseconds are used. gRPC also takes
  // min_reconnect_backoff as the time a connection attempt (TCP and TLS handshakes) is given
  // (default 20 s).
  absl::Duration initial_reconnect_backoff = absl::ZeroDuration();
  absl::Duration min_reconnect_backoff = absl::ZeroDuration();
  absl::Duration max_reconnect_backoff = absl::ZeroDuration();

  // HTTP/2 flow-control window (GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES) and write buffer
  // (GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE), in bytes. Default 0: gRPC's default. Otherwise positive.
  int http2_stream_lookahead_bytes = 0;
  int http2_write_buffer_bytes = 0;

  // Interval of HTTP/2 keepalive pings on an idle connection. Default zero: none (gRPC's default).
  absl::Duration keepalive_time = absl::ZeroDuration();

  // Whether the channel keeps its connections to itself (GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL)
  // instead of sharing them with other channels of the same arguments. Default false.
  bool local_subchannel_pool = false;

  // Further integer channel arguments, set as given after the ones above (for example a channel
  // index that makes otherwise equal channels distinct). Default none.
  std::vector<std::pair<std::string, int>> int_args;

  // How the channel authenticates. Default null: plaintext (insecure credentials).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// The options of each role's channels, as each has used them.

// The client library's data-path channels to servers: no message limit (the job's limit is checked
// by the client and the server), 64 MiB windows and 8 MiB write buffers, own connections.
ChannelOptions ClientDataChannelOptions();
// A primary's replication channels to its replicas: no message limit, reconnect within 50 to
// 500 ms, the client's windows and write buffers.
ChannelOptions ReplicationChannelOptions();
// Channels to the coordinator of servers, workers and clients: 256 MiB messages (a big cluster's
// map), reconnect within 100 ms to 1 s.
ChannelOptions CoordinatorChannelOptions();
// The coordinator's channels to servers for their statuses: reconnect within 100 ms to 1 s.
ChannelOptions StatusFanoutChannelOptions();
// ps_ctl's channel to the coordinator: 256 MiB received (a big cluster's status).
ChannelOptions CtlChannelOptions();
// The coordinator's channels to servers for checkpoints: gRPC's defaults.
ChannelOptions CheckpointChannelOptions();

// The channel arguments `options` stands for (without the credentials).
grpc::ChannelArguments ToChannelArguments(const ChannelOptions& options);

// A channel to `address` ("host:port", or any gRPC target) made with `options`. Never null; like
// every gRPC channel it connects lazily, so an unreachable address shows up on the first call (or
// WaitForConnected) as UNAVAILABLE.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const ChannelOptions& options);

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_CHANNEL_FACTORY_H_
