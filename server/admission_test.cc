#include "server/admission.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "absl/strings/match.h"

namespace ps {
namespace server {
namespace {

TEST_CASE("admission refuses the request over the per-peer request limit, naming it",
          "[server][admission]") {
  AdmissionLimits limits;
  limits.max_requests_per_peer = 2;
  Admission admission(limits);
  auto a = admission.Admit("ipv4:127.0.0.1:5555", 10);
  auto b = admission.Admit("ipv4:127.0.0.1:5555", 10);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const auto refused = admission.Admit("ipv4:127.0.0.1:5555", 10);
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.status().message() ==
        "server busy: 2 requests in flight from ipv4:127.0.0.1:5555 "
        "(--max_inflight_requests_per_peer=2); retry later");
  // Another peer is not held back by this one.
  CHECK(admission.Admit("ipv4:127.0.0.1:6666", 10).ok());
  CHECK(admission.requests_in_flight() == 2);
  CHECK(admission.bytes_in_flight() == 20);
  CHECK(admission.refused() == 1);
  a->Release();
  CHECK(admission.Admit("ipv4:127.0.0.1:5555", 10).ok());
}

TEST_CASE("admission refuses the request over the server-wide limits", "[server][admission]") {
  AdmissionLimits limits;
  limits.max_requests = 2;
  limits.max_requests_per_peer = 0;
  limits.max_bytes = 100;
  limits.max_bytes_per_peer = 0;
  Admission admission(limits);
  auto a = admission.Admit("p1", 60);
  REQUIRE(a.ok());
  const auto too_many_bytes = admission.Admit("p2", 41);
  REQUIRE(too_many_bytes.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(too_many_bytes.status().message(), "(--max_inflight_bytes=100)"));
  auto b = admission.Admit("p2", 40);
  REQUIRE(b.ok());
  const auto too_many = admission.Admit("p3", 0);
  REQUIRE(too_many.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(too_many.status().message(), "(--max_inflight_requests=2)"));
  // A refusal changes no count.
  CHECK(admission.requests_in_flight() == 2);
  CHECK(admission.bytes_in_flight() == 100);
}

TEST_CASE("admission admits one request above a byte limit when nothing else is in flight",
          "[server][admission]") {
  AdmissionLimits limits;
  limits.max_bytes = 100;
  limits.max_bytes_per_peer = 50;
  Admission admission(limits);
  {
    auto big = admission.Admit("p", 1000);
    REQUIRE(big.ok());
    const auto second = admission.Admit("p", 1);
    REQUIRE(second.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(absl::StrContains(second.status().message(), "--max_inflight_bytes=100"));
  }
  auto a = admission.Admit("p", 30);
  REQUIRE(a.ok());
  const auto over_peer = admission.Admit("p", 30);
  REQUIRE(over_peer.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(over_peer.status().message(), "--max_inflight_bytes_per_peer=50"));
}

TEST_CASE("admission tickets give their share back when destroyed or moved from",
          "[server][admission]") {
  Admission admission(AdmissionLimits{});
  {
    auto a = admission.Admit("p", 7);
    REQUIRE(a.ok());
    Admission::Ticket moved = std::move(*a);
    Admission::Ticket again;
    again = std::move(moved);
    CHECK(admission.requests_in_flight("p") == 1);
  }
  CHECK(admission.requests_in_flight() == 0);
  CHECK(admission.bytes_in_flight() == 0);
  CHECK(admission.requests_in_flight("p") == 0);
}

TEST_CASE("admission limits are validated with the flag's name", "[server][admission]") {
  AdmissionLimits limits;
  CHECK(ValidateAdmissionLimits(limits).ok());
  limits.max_requests_per_peer = -1;
  absl::Status status = ValidateAdmissionLimits(limits);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "--max_inflight_requests_per_peer must be >= 0"));
  limits = AdmissionLimits{};
  limits.max_bytes = 10;
  status = ValidateAdmissionLimits(limits);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "--max_inflight_bytes_per_peer=1073741824 is above"));
  limits.max_bytes = 0;  // no server-wide limit: any per-peer one
  CHECK(ValidateAdmissionLimits(limits).ok());
}

TEST_CASE("admission counts stay exact under concurrent peers", "[server][admission]") {
  AdmissionLimits limits;
  limits.max_requests = 64;
  limits.max_requests_per_peer = 4;
  Admission admission(limits);
  // Counted per thread and checked on this one: Catch2's assertions are not thread-safe.
  std::vector<int> over_limit(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&admission, &over_limit, t] {
      const std::string peer = "peer" + std::to_string(t % 4);
      for (int i = 0; i < 20000; ++i) {
        auto ticket = admission.Admit(peer, 3);
        if (ticket.ok() && admission.requests_in_flight(peer) > 4) ++over_limit[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) CHECK(over_limit[t] == 0);
  CHECK(admission.requests_in_flight() == 0);
  CHECK(admission.bytes_in_flight() == 0);
}

}  // namespace
}  // namespace server
}  // namespace ps
