#include "worker/model/model_spec.h"

#include <catch2/catch.hpp>
#include <string>

namespace ps {
namespace worker {
namespace {

// A job of two tables (emb, dim 16; lin, dim 1) whose fields all read emb.
config::Job BaseJob(config::Model::Type type) {
  config::Job job;
  auto* emb = job.add_tables();
  emb->set_name("emb");
  emb->set_dim(16);
  auto* lin = job.add_tables();
  lin->set_name("lin");
  lin->set_dim(1);
  config::Model* m = job.mutable_model();
  m->set_type(type);
  m->set_shared_table("emb");
  if (type == config::Model::WIDE_DEEP || type == config::Model::DEEPFM) {
    m->set_linear_table("lin");
  }
  return job;
}

// A schema of 2 dense columns and 3 sparse fields a, b, c.
void AddSchema(config::Job* job) {
  config::Schema* s = job->mutable_data()->mutable_schema();
  s->set_label("1");
  s->add_dense()->set_column("2");
  s->add_dense()->set_column("3");
  for (const char* name : {"a", "b", "c"}) {
    config::SparseField* f = s->add_sparse();
    f->set_column(std::string("4") + name);
    f->set_name(name);
  }
}

// The INVALID_ARGUMENT message of FromJob; fails the test when it is not one.
std::string Refusal(const config::Job& job) {
  const absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST_CASE("FromJob reads every family's shapes", "[worker][model]") {
  SECTION("DLRM, the defaults") {
    config::Job job = BaseJob(config::Model::DLRM);
    job.mutable_model()->add_bottom_mlp(32);
    job.mutable_model()->add_bottom_mlp(16);
    const absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
    REQUIRE(spec.ok());
    CHECK(spec->num_dense == 13);
    CHECK(spec->field_dims == std::vector<int>(26, 16));
    CHECK(spec->bottom == std::vector<int>{32, 16});
    CHECK(spec->num_linear == 0);
    CHECK(spec->emb_width() == 26 * 16);
  }
  SECTION("DEEPFM: a first-order input per field") {
    const absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(BaseJob(config::Model::DEEPFM));
    REQUIRE(spec.ok());
    CHECK(spec->num_linear == 26);
    CHECK(spec->emb_width() == 26 * 17);
  }
  SECTION("WIDE_DEEP over a schema: an input per wide feature, fields' tables of any dim") {
    config::Job job = BaseJob(config::Model::WIDE_DEEP);
    AddSchema(&job);
    job.mutable_data()->mutable_schema()->mutable_sparse(1)->set_table("lin");
    job.mutable_model()->add_wide()->add_fields("a");
    auto* cross = job.mutable_model()->add_wide();
    cross->add_fields("b");
    cross->add_fields("c");
    const absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
    REQUIRE(spec.ok());
    CHECK(spec->num_dense == 2);
    CHECK(spec->field_dims == std::vector<int>{16, 1, 16});
    CHECK(spec->num_linear == 2);
  }
  SECTION("DCN_V2's knobs") {
    config::Job job = BaseJob(config::Model::DCN_V2);
    job.mutable_model()->set_cross_layers(3);
    job.mutable_model()->set_cross_rank(8);
    const absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
    REQUIRE(spec.ok());
    CHECK(spec->cross_layers == 3);
    CHECK(spec->cross_rank == 8);
  }
}

// One check per refusal model_spec.h lists.
TEST_CASE("FromJob refuses shapes the family cannot take", "[worker][model]") {
  using Catch::Contains;
  config::Job job = BaseJob(config::Model::DLRM);
  SECTION("num_dense_features against the schema") {
    AddSchema(&job);
    job.mutable_model()->set_num_dense_features(13);
    CHECK_THAT(Refusal(job), Contains("model.num_dense_features is 13"));
  }
  SECTION("num_sparse_features against the schema") {
    AddSchema(&job);
    job.mutable_model()->set_num_sparse_features(26);
    CHECK_THAT(Refusal(job), Contains("model.num_sparse_features is 26"));
  }
  SECTION("a field without a table") {
    AddSchema(&job);
    job.mutable_model()->clear_shared_table();
    CHECK_THAT(Refusal(job), Contains("sparse field 0 has no table"));
  }
  SECTION("a field reading a table the job lacks") {
    job.mutable_model()->set_shared_table("nope");
    CHECK_THAT(Refusal(job), Contains("which the job lacks"));
  }
  SECTION("dot_interaction over fields of different dims") {
    AddSchema(&job);
    job.mutable_data()->mutable_schema()->mutable_sparse(2)->set_table("lin");
    job.mutable_model()->set_dot_interaction(true);
    CHECK_THAT(Refusal(job), Contains("model.dot_interaction needs every field's table"));
  }
  SECTION("DEEPFM over fields of different dims") {
    job = BaseJob(config::Model::DEEPFM);
    AddSchema(&job);
    job.mutable_data()->mutable_schema()->mutable_sparse(2)->set_table("lin");
    CHECK_THAT(Refusal(job), Contains("a DEEPFM model needs every field's table"));
  }
  SECTION("a bottom MLP not ending in the fields' dim") {
    job.mutable_model()->add_bottom_mlp(8);
    CHECK_THAT(Refusal(job), Contains("model.bottom_mlp must end with the embedding dim 16"));
  }
  SECTION("DLRM without dense features") {
    job.mutable_model()->set_num_dense_features(0);
    CHECK_THAT(Refusal(job), Contains("at least one dense feature"));
  }
  SECTION("linear_table missing") {
    job = BaseJob(config::Model::DEEPFM);
    job.mutable_model()->clear_linear_table();
    CHECK_THAT(Refusal(job), Contains("needs model.linear_table"));
  }
  SECTION("linear_table not of dim 1") {
    job = BaseJob(config::Model::DEEPFM);
    job.mutable_model()->set_linear_table("emb");
    CHECK_THAT(Refusal(job), Contains("must name a table of dim 1"));
  }
  SECTION("WIDE_DEEP without wide features") {
    job = BaseJob(config::Model::WIDE_DEEP);
    AddSchema(&job);
    CHECK_THAT(Refusal(job), Contains("at least one model.wide feature"));
  }
  SECTION("a wide feature naming no field") {
    job = BaseJob(config::Model::WIDE_DEEP);
    AddSchema(&job);
    job.mutable_model()->add_wide();
    CHECK_THAT(Refusal(job), Contains("model.wide[0] names no field"));
  }
  SECTION("a wide feature naming a field the schema lacks") {
    job = BaseJob(config::Model::WIDE_DEEP);
    AddSchema(&job);
    job.mutable_model()->add_wide()->add_fields("z");
    CHECK_THAT(Refusal(job), Contains("model.wide[0] names field \"z\""));
  }
  SECTION("bottom_mlp outside DLRM") {
    job = BaseJob(config::Model::DCN_V2);
    job.mutable_model()->add_bottom_mlp(16);
    CHECK_THAT(Refusal(job), Contains("model.bottom_mlp and model.dot_interaction are DLRM's"));
  }
  SECTION("cross_* outside DCN_V2") {
    job.mutable_model()->set_cross_rank(4);
    CHECK_THAT(Refusal(job), Contains("are DCN_V2's; a DLRM model has none"));
  }
  SECTION("wide outside WIDE_DEEP") {
    job = BaseJob(config::Model::DEEPFM);
    job.mutable_model()->add_wide()->add_fields("a");
    CHECK_THAT(Refusal(job), Contains("model.wide is WIDE_DEEP's"));
  }
  SECTION("linear_table outside WIDE_DEEP and DEEPFM") {
    job.mutable_model()->set_linear_table("lin");
    CHECK_THAT(Refusal(job), Contains("model.linear_table is WIDE_DEEP's and DEEPFM's"));
  }
  SECTION("cross_layers out of range") {
    job = BaseJob(config::Model::DCN_V2);
    job.mutable_model()->set_cross_layers(17);
    CHECK_THAT(Refusal(job), Contains("model.cross_layers must be 1 to 16"));
  }
}

}  // namespace
}  // namespace worker
}  // namespace ps
