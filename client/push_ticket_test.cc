#include "client/push_ticket.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

namespace ps {
namespace {

PushTicket Example() {
  PushTicket ticket;
  ticket.worker_id = 12;
  ticket.table = "user";
  ticket.clock = 41;
  ticket.fingerprint = 0x0123456789abcdefull;
  ticket.runs = {{7, 3, 0, 100}, {7, 5, 0, 20}, {8, 5, 20, 4}};
  return ticket;
}

TEST_CASE("a ticket survives its bytes", "[client][push_ticket]") {
  const PushTicket ticket = Example();
  const std::optional<PushTicket> back = PushTicket::Decode(ticket.Encode());
  REQUIRE(back.has_value());
  CHECK(*back == ticket);
  CHECK(back->first_sequence() == 7);
  CHECK(back->last_sequence() == 8);
  CHECK(PushTicket{}.first_sequence() == 0);
}

TEST_CASE("bytes that are not a ticket are refused", "[client][push_ticket]") {
  const std::string bytes = Example().Encode();
  std::mt19937 random(7);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    CHECK_FALSE(PushTicket::Decode(bytes.substr(0, cut)).has_value());
  }
  CHECK_FALSE(PushTicket::Decode(bytes + "x").has_value());
  std::string other_version = bytes;
  other_version[0] = 9;
  CHECK_FALSE(PushTicket::Decode(other_version).has_value());
}

TEST_CASE("a failed status carries the ticket, an OK one nothing", "[client][push_ticket]") {
  const PushTicket ticket = Example();
  const absl::Status failed = ticket.AttachTo(absl::UnavailableError("server 2 is down"));
  CHECK(failed.code() == absl::StatusCode::kUnavailable);
  CHECK(failed.message() == "server 2 is down");
  const std::optional<PushTicket> carried = PushTicket::FromStatus(failed);
  REQUIRE(carried.has_value());
  CHECK(*carried == ticket);
  CHECK(ticket.AttachTo(absl::OkStatus()).ok());
  CHECK_FALSE(PushTicket::FromStatus(absl::OkStatus()).has_value());
  CHECK_FALSE(PushTicket::FromStatus(absl::UnavailableError("no ticket")).has_value());
}

TEST_CASE("the fingerprint tells other keys or gradients apart", "[client][push_ticket]") {
  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> grads = {0.5f, 0.25f, 0.125f};
  const uint64_t f = PushTicket::Fingerprint(keys, grads);
  CHECK(PushTicket::Fingerprint(keys, grads) == f);
  grads[1] = 0.3f;
  CHECK(PushTicket::Fingerprint(keys, grads) != f);
  grads[1] = 0.25f;
  keys[2] = 4;
  CHECK(PushTicket::Fingerprint(keys, grads) != f);
}

}  // namespace
}  // namespace ps
