#include "client/internal/server_transport.h"

#include "absl/strings/str_cat.h"

namespace ps {
namespace client_internal {

std::string PeerOf(const Exchange& exchange) {
  if (exchange.in_region || exchange.context == nullptr) {
    return absl::StrCat(exchange.address != nullptr ? *exchange.address : "a server",
                        exchange.in_region ? " (in shared memory)" : "");
  }
  return exchange.context->peer();
}

}  // namespace client_internal
}  // namespace ps
