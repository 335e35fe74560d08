#include "server/coordinator/rendezvous_store.h"

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"

namespace ps {
namespace coordinator {
namespace {

using Strings = std::vector<std::string>;

TEST_CASE("rendezvous store: set, overwrite and get in order", "[rendezvous_store]") {
  RendezvousStore kv;
  REQUIRE(kv.Set("a", "1").ok());
  REQUIRE(kv.Set("b", "2").ok());
  REQUIRE(kv.Set("a", "3").ok());
  const absl::StatusOr<Strings> values = kv.Get({"b", "a"});
  REQUIRE(values.ok());
  CHECK(*values == Strings{"2", "3"});
  CHECK(kv.size() == 2);
}

TEST_CASE("rendezvous store: keys and values are checked against the bounds",
          "[rendezvous_store]") {
  RendezvousStore kv;
  CHECK(kv.Set("", "v").code() == absl::StatusCode::kInvalidArgument);
  CHECK(kv.Set(std::string(RendezvousStore::kMaxKeyBytes + 1, 'k'), "v").code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(kv.Set("k", std::string(RendezvousStore::kMaxValueBytes + 1, 'v')).code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(kv.Set(std::string(RendezvousStore::kMaxKeyBytes, 'k'), "").ok());
  CHECK(kv.size() == 1);  // nothing of the refused ones was kept
  CHECK(kv.Get({"x", ""}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("rendezvous store: Get names the first key that is not set", "[rendezvous_store]") {
  RendezvousStore kv;
  REQUIRE(kv.Set("a", "1").ok());
  const absl::StatusOr<Strings> values = kv.Get({"a", "missing", "other"});
  REQUIRE(values.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(values.status().message()), Catch::Contains("\"missing\""));
}

TEST_CASE("rendezvous store: a wait's answer", "[rendezvous_store]") {
  RendezvousStore kv;
  REQUIRE(kv.Set("a", "1").ok());
  CHECK_FALSE(kv.Answer({"a", "b"}, /*expired=*/false).has_value());
  const auto expired = kv.Answer({"a", "b", "c"}, /*expired=*/true);
  REQUIRE(expired.has_value());
  REQUIRE(expired->status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(expired->status().message()), Catch::Contains("\"b\", \"c\""));
  REQUIRE(kv.Set("b", "2").ok());
  const auto answered = kv.Answer({"b", "a"}, /*expired=*/GENERATE(false, true));
  REQUIRE(answered.has_value());
  REQUIRE(answered->ok());
  CHECK(**answered == Strings{"2", "1"});
}

TEST_CASE("rendezvous store: a deadline names at most 10 missing keys", "[rendezvous_store]") {
  RendezvousStore kv;
  Strings keys;
  for (int i = 0; i < 13; ++i) keys.push_back("k" + std::to_string(i));
  const auto answer = kv.Answer(keys, /*expired=*/true);
  REQUIRE(answer.has_value());
  const std::string message(answer->status().message());
  CHECK_THAT(message, Catch::Contains("\"k9\" and 3 more"));
  CHECK_THAT(message, !Catch::Contains("\"k10\""));
}

TEST_CASE("rendezvous store: erasing a prefix, and taking up saved entries", "[rendezvous_store]") {
  RendezvousStore kv;
  kv.TakeUp(
      std::map<std::string, std::string>{{"ckpt/1/a", "x"}, {"ckpt/1/b", "y"}, {"gloo", "z"}});
  CHECK(kv.size() == 3);
  kv.ErasePrefix("ckpt/1/");
  CHECK(kv.size() == 1);
  CHECK(kv.Get({"ckpt/1/a"}).status().code() == absl::StatusCode::kNotFound);
  CHECK(kv.Get({"gloo"}).ok());
}

}  // namespace
}  // namespace coordinator
}  // namespace ps
