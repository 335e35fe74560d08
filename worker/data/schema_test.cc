#include "worker/data/schema.h"

#include <catch2/catch.hpp>

namespace ps {
namespace worker {
namespace {

TEST_CASE("the CRITEO preset takes the model's counts", "[worker][schema]") {
  config::Job job;
  job.mutable_model()->set_num_dense_features(4);
  job.mutable_model()->set_num_sparse_features(2);
  absl::StatusOr<SchemaOptions> schema = SchemaOf(job);
  REQUIRE(schema.ok());
  CHECK(schema->num_dense == 4);
  CHECK(schema->num_sparse == 2);
  CHECK(schema->text == nullptr);
  CHECK(FieldNames(job) == std::vector<std::string>{"C1", "C2"});
}

TEST_CASE("a delimited schema compiles its columns, transforms and fields", "[worker][schema]") {
  config::Job job;
  config::Data* data = job.mutable_data();
  data->set_format(config::Data::DELIMITED);
  config::Schema* s = data->mutable_schema();
  s->set_delimiter(config::Schema::COMMA);
  s->set_header(true);
  s->set_label("click");
  config::DenseColumn* price = s->add_dense();
  price->set_column("4");
  price->set_transform(config::DenseColumn::STANDARDIZE);
  price->set_mean(2);
  price->set_stddev(0.5);
  config::SparseField* tags = s->add_sparse();
  tags->set_column("tags");
  tags->set_separator("|");
  tags->set_max_values(7);
  tags->set_overflow(config::SparseField::SKIP);
  config::SparseField* user = s->add_sparse();
  user->set_column("user");
  user->set_name("u");
  absl::StatusOr<SchemaOptions> schema = SchemaOf(job);
  REQUIRE(schema.ok());
  CHECK(schema->num_dense == 1);
  CHECK(schema->num_sparse == 2);
  const TextSchema& text = *schema->text;
  CHECK(text.delimiter == ',');
  CHECK(text.label.name == "click");
  CHECK(text.dense[0].column.index == 3);
  CHECK(text.dense[0].name == "4");
  CHECK(text.dense[0].transform == DenseColumnSpec::Transform::kStandardize);
  CHECK(text.dense[0].stddev == 0.5f);
  CHECK(text.sparse[0].separator == '|');
  CHECK(text.sparse[0].max_values == 7);
  CHECK(text.sparse[0].skip_overflow);
  CHECK(text.sparse[1].separator == 0);
  CHECK(FieldNames(job) == std::vector<std::string>{"tags", "u"});

  tags->set_separator(",");  // the delimiter
  CHECK(SchemaOf(job).status().code() == absl::StatusCode::kInvalidArgument);
  tags->set_separator("|");
  price->clear_stddev();
  CHECK(SchemaOf(job).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace worker
}  // namespace ps
