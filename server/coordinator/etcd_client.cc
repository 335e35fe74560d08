#include "server/coordinator/etcd_client.h"

#include <httplib.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace coordinator {
namespace {

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  // Our own messages always print.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

template <typename T>
absl::StatusOr<T> FromJson(const std::string& json, absl::string_view what) {
  T message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &message, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("etcd: the answer to ", what, " does not parse (",
                                            status.ToString(), "): ", json.substr(0, 200)));
  }
  return message;
}

bool IsWrite(const etcd::RequestOp& op) {
  return op.has_request_put() || op.has_request_delete_range();
}

// etcd's answers that another member may not give: no raft leader here, or a leader change
// under the request.
bool MemberCannotServe(absl::string_view message) {
  return absl::StrContains(message, "no leader") || absl::StrContains(message, "leader changed") ||
         absl::StrContains(message, "timed out") || absl::StrContains(message, "stopped");
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(absl::string_view endpoints,
                                                               EtcdClientOptions options) {
  if (options.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd: request_timeout must be > 0");
  }
  std::vector<std::string> parsed;
  for (absl::string_view entry : absl::StrSplit(endpoints, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (absl::StartsWith(entry, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint '", entry, "': https is not supported yet (use http:// endpoints)"));
    }
    absl::ConsumePrefix(&entry, "http://");
    absl::ConsumeSuffix(&entry, "/");
    absl::StatusOr<HostPort> host_port = ParseHostPort(entry, AddressUse::kDial);
    if (!host_port.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", entry, "': ", host_port.status().message()));
    }
    parsed.push_back(JoinHostPort(host_port->host, host_port->port));
  }
  if (parsed.empty() || endpoints.empty()) {
    return absl::InvalidArgumentError("etcd: no endpoints given");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(parsed), options));
}

std::string EtcdClient::PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

absl::Duration EtcdClient::last_latency() const {
  absl::MutexLock lock(&mu_);
  return last_latency_;
}

absl::StatusOr<std::string> EtcdClient::PostTo(const std::string& endpoint, absl::string_view path,
                                               const std::string& body, absl::Duration timeout,
                                               bool* retry_elsewhere) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  *retry_elsewhere = true;
  absl::StatusOr<HostPort> host_port = ParseHostPort(endpoint, AddressUse::kDial);
  if (!host_port.ok()) return host_port.status();
  httplib::Client client(host_port->host, host_port->port);
  const int64_t usec = absl::ToInt64Microseconds(timeout);
  client.set_connection_timeout(usec / 1000000, usec % 1000000);
  client.set_read_timeout(usec / 1000000, usec % 1000000);
  client.set_write_timeout(usec / 1000000, usec % 1000000);
  httplib::Request request;
  request.method = "POST";
  request.path = std::string(path);
  request.body = body;
  request.set_header("Content-Type", "application/json");
  httplib::Response response;
  httplib::Error failure = httplib::Error::Success;
  // etcd's gateway ends an error's chunked body with HTTP trailers, which cpp-httplib 0.11 fails
  // to read ("Read") after it has read the status and the body: those are the answer.
  const bool sent = client.send(request, response, failure);
  const bool answered =
      sent || (failure == httplib::Error::Read && response.status > 0 && !response.body.empty());
  if (!answered) {
    return absl::UnavailableError(absl::StrCat(endpoint, ": ", httplib::to_string(failure)));
  }
  if (response.status == 200) {
    *retry_elsewhere = false;
    return std::move(response.body);
  }
  absl::StatusOr<etcd::GatewayError> error =
      FromJson<etcd::GatewayError>(response.body, std::string(path));
  const std::string message =
      error.ok() ? (error->message().empty() ? error->error() : error->message())
                 : absl::StrCat("HTTP ", response.status, " ", response.body.substr(0, 200));
  if (error.ok() && error->code() > 0 && error->code() <= 16 && !MemberCannotServe(message)) {
    *retry_elsewhere = false;
    return absl::Status(static_cast<absl::StatusCode>(error->code()),
                        absl::StrCat("etcd ", endpoint, ": ", message));
  }
  return absl::UnavailableError(absl::StrCat(endpoint, ": ", message));
}

absl::StatusOr<std::string> EtcdClient::Post(absl::string_view path, const std::string& body,
                                             absl::Duration timeout) {
  // Each endpoint gets request_timeout; a call given a longer `timeout` gets that in all, each
  // endpoint what is left of it.
  const bool budget = timeout > options_.request_timeout;
  const absl::Time deadline = absl::Now() + timeout;
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = current_;
  }
  std::vector<std::string> failures;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t at = (first + i) % endpoints_.size();
    const absl::Time start = absl::Now();
    const absl::Duration allowed = budget ? deadline - start : options_.request_timeout;
    if (allowed <= absl::ZeroDuration()) break;
    bool retry_elsewhere = false;
    absl::StatusOr<std::string> answer =
        PostTo(endpoints_[at], path, body, allowed, &retry_elsewhere);
    if (answer.ok() || !retry_elsewhere) {
      absl::MutexLock lock(&mu_);
      current_ = at;
      if (answer.ok()) last_latency_ = absl::Now() - start;
      return answer;
    }
    failures.push_back(std::string(answer.status().message()));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd: no endpoint answered ", path, " (", absl::StrJoin(failures, "; "), ")"));
}

absl::StatusOr<etcd::RangeResponse> EtcdClient::Range(absl::string_view key,
                                                      absl::string_view range_end) {
  etcd::RangeRequest request;
  request.set_key(std::string(key));
  request.set_range_end(std::string(range_end));
  PS_ASSIGN_OR_RETURN(const std::string answer, Post("/v3/kv/range", ToJson(request)));
  return FromJson<etcd::RangeResponse>(answer, "range");
}

absl::StatusOr<etcd::RangeResponse> EtcdClient::RangePrefix(absl::string_view prefix) {
  return Range(prefix, PrefixEnd(prefix));
}

absl::StatusOr<etcd::TxnResponse> EtcdClient::Txn(const etcd::TxnRequest& request,
                                                  absl::Duration timeout) {
  bool write = false;
  for (const etcd::RequestOp& op : request.success()) write = write || IsWrite(op);
  for (const etcd::RequestOp& op : request.failure()) write = write || IsWrite(op);
  if (write) writes_.fetch_add(1, std::memory_order_relaxed);
  PS_ASSIGN_OR_RETURN(const std::string answer, Post("/v3/kv/txn", ToJson(request), timeout));
  return FromJson<etcd::TxnResponse>(answer, "txn");
}

absl::StatusOr<etcd::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_s) {
  etcd::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  writes_.fetch_add(1, std::memory_order_relaxed);
  PS_ASSIGN_OR_RETURN(const std::string answer, Post("/v3/lease/grant", ToJson(request)));
  PS_ASSIGN_OR_RETURN(etcd::LeaseGrantResponse response,
                      FromJson<etcd::LeaseGrantResponse>(answer, "lease grant"));
  if (!response.error().empty() || response.id() == 0) {
    return absl::UnavailableError(absl::StrCat("etcd: lease grant refused: ", response.error()));
  }
  return response;
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  etcd::LeaseKeepAliveRequest request;
  request.set_id(id);
  PS_ASSIGN_OR_RETURN(const std::string answer, Post("/v3/lease/keepalive", ToJson(request)));
  PS_ASSIGN_OR_RETURN(const etcd::LeaseKeepAliveResult result,
                      FromJson<etcd::LeaseKeepAliveResult>(answer, "lease keepalive"));
  if (result.result().ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd: lease ", id, " has expired"));
  }
  return result.result().ttl();
}

absl::Status EtcdClient::LeaseRevoke(int64_t id) {
  etcd::LeaseRevokeRequest request;
  request.set_id(id);
  writes_.fetch_add(1, std::memory_order_relaxed);
  return Post("/v3/lease/revoke", ToJson(request)).status();
}

std::vector<EtcdClient::EndpointHealth> EtcdClient::CheckEndpoints(absl::Duration timeout) {
  std::vector<EndpointHealth> out;
  for (const std::string& endpoint : endpoints_) {
    EndpointHealth health;
    health.endpoint = endpoint;
    const absl::Time start = absl::Now();
    bool retry_elsewhere = false;
    absl::StatusOr<std::string> answer =
        PostTo(endpoint, "/v3/maintenance/status", ToJson(etcd::StatusRequest()), timeout,
               &retry_elsewhere);
    absl::StatusOr<etcd::StatusResponse> status =
        answer.ok() ? FromJson<etcd::StatusResponse>(*answer, "status") : answer.status();
    if (!status.ok()) {
      health.error = std::string(status.status().message());
    } else if (status->leader() == 0) {
      health.error = "no raft leader";
    } else {
      health.healthy = true;
      health.latency_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
      health.is_raft_leader = status->leader() == status->header().member_id();
      health.raft_index = status->raftindex();
    }
    out.push_back(std::move(health));
  }
  return out;
}

}  // namespace coordinator
}  // namespace ps
