// What a coordinator that does not lead answers: every call of the Coordinator service (and of
// any other) gets UNAVAILABLE saying that it stands by and who leads, so that members move on to
// the leader (common/coordinator_client.h) and never read a standby's state.
#ifndef PS_SERVER_COORDINATOR_STANDBY_SERVICE_H_
#define PS_SERVER_COORDINATOR_STANDBY_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>

#include <functional>

#include "absl/status/status.h"

namespace ps {
namespace coordinator {

// A StandbyService answers every call at once with `why()` (an error: UNAVAILABLE
// "coordinator A is a standby; the leader is B", from LeaderElection::CheckLeading).
// Thread-safe when `why` is.
class StandbyService final : public grpc::CallbackGenericService {
 public:
  explicit StandbyService(std::function<absl::Status()> why) : why_(std::move(why)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override;

 private:
  const std::function<absl::Status()> why_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_STANDBY_SERVICE_H_
