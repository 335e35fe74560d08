#include "common/grpc_status.h"

#include <catch2/catch.hpp>

#include "absl/status/statusor.h"
#include "common/status_macros.h"

namespace ps {
namespace {

TEST_CASE("grpc and absl statuses round-trip every canonical code", "[common][status]") {
  const int code = GENERATE(range(0, 17));
  const absl::Status original(static_cast<absl::StatusCode>(code),
                              code == 0 ? "" : "what went wrong");
  const grpc::Status wire = ToGrpcStatus(original);
  CHECK(static_cast<int>(wire.error_code()) == code);
  const absl::Status back = FromGrpcStatus(wire);
  CHECK(back == original);
}

TEST_CASE("gRPC's codes are the canonical codes", "[common][status]") {
  CHECK(ToGrpcStatus(absl::NotFoundError("t")).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(ToGrpcStatus(absl::ResourceExhaustedError("t")).error_code() ==
        grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")) ==
        absl::UnavailableError("down"));
}

absl::Status FailIfNegative(int x) {
  if (x < 0) return absl::InvalidArgumentError("negative");
  return absl::OkStatus();
}

absl::StatusOr<int> Twice(int x) {
  PS_RETURN_IF_ERROR(FailIfNegative(x));
  return 2 * x;
}

absl::StatusOr<int> TwicePlusOne(int x) {
  PS_ASSIGN_OR_RETURN(const int twice, Twice(x));
  return twice + 1;
}

TEST_CASE("status macros return early on error and pass values on", "[common][status]") {
  CHECK(*TwicePlusOne(3) == 7);
  const absl::StatusOr<int> bad = TwicePlusOne(-1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status() == absl::InvalidArgumentError("negative"));
}

}  // namespace
}  // namespace ps
