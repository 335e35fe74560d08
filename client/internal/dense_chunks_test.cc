#include "client/internal/dense_chunks.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace ps {
namespace client_internal {
namespace {

rpc::DenseChunk* AddChunk(rpc::PullDenseResponse* r, uint32_t index, std::vector<float> v) {
  rpc::DenseChunk* c = r->add_chunks();
  c->set_chunk(index);
  c->set_values(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return c;
}

TEST_CASE("dense chunks land at their offsets; sizes are checked", "[client][dense]") {
  rpc::PullDenseResponse r;
  r.set_total_floats(5);
  AddChunk(&r, 1, {3, 4});  // out of order
  AddChunk(&r, 0, {1, 2});
  AddChunk(&r, 2, {5});     // the short last chunk
  std::vector<float> values(5);
  REQUIRE(CopyDenseChunks("t", r, 2, absl::MakeSpan(values)).ok());
  CHECK(values == std::vector<float>{1, 2, 3, 4, 5});

  std::vector<float> wrong(4);
  CHECK(CopyDenseChunks("t", r, 2, absl::MakeSpan(wrong)).code() ==
        absl::StatusCode::kInvalidArgument);
  AddChunk(&r, 7, {1});
  CHECK(CopyDenseChunks("t", r, 2, absl::MakeSpan(values)).code() == absl::StatusCode::kInternal);
  r.mutable_chunks()->RemoveLast();
  r.mutable_chunks(0)->mutable_values()->pop_back();
  CHECK(CopyDenseChunks("t", r, 2, absl::MakeSpan(values)).code() == absl::StatusCode::kInternal);
}

TEST_CASE("a push's body holds the chunks asked for, the last one short", "[client][dense]") {
  const std::vector<float> values = {1, 2, 3, 4, 5};
  rpc::PushDenseRequest request;
  SetPushDenseBody("t", values, 2, {2, 0}, rpc::PushDenseRequest::ASSIGN, &request);
  CHECK(request.name() == "t");
  CHECK(request.total_floats() == 5);
  CHECK(request.kind() == rpc::PushDenseRequest::ASSIGN);
  REQUIRE(request.chunks_size() == 2);
  CHECK(request.chunks(0).chunk() == 2);
  CHECK(request.chunks(0).values() == std::string(reinterpret_cast<const char*>(&values[4]), 4));
  CHECK(request.chunks(1).chunk() == 0);
  CHECK(request.chunks(1).values() == std::string(reinterpret_cast<const char*>(&values[0]), 8));
}

}  // namespace
}  // namespace client_internal
}  // namespace ps
