#include "server/coordinator/standby_service.h"

#include "common/grpc_status.h"

namespace ps {
namespace coordinator {
namespace {

class Refusal final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(const absl::Status& why) { Finish(ToGrpcStatus(why)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerGenericBidiReactor* StandbyService::CreateReactor(grpc::GenericCallbackServerContext*) {
  absl::Status why = why_();
  if (why.ok()) why = absl::UnavailableError("coordinator is standing by");
  return new Refusal(why);
}

}  // namespace coordinator
}  // namespace ps
