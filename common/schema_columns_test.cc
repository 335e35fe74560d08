#include "common/schema_columns.h"

#include <catch2/catch.hpp>

namespace ps {
namespace {

TEST_CASE("column references are numbers from 1 or header names", "[common][schema_columns]") {
  absl::StatusOr<ColumnRef> ref = ParseColumnRef("3", false);
  REQUIRE(ref.ok());
  CHECK(ref->index == 2);
  ref = ParseColumnRef("user_id", true);
  REQUIRE(ref.ok());
  CHECK(ref->index == -1);
  CHECK(ref->name == "user_id");
  ref = ParseColumnRef("1048576", false);
  REQUIRE(ref.ok());
  CHECK(ref->index == (1 << 20) - 1);
  for (const char* bad : {"0", "1048577", "99999999999", ""}) {
    CAPTURE(bad);
    CHECK(ParseColumnRef(bad, true).status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(ParseColumnRef("0", true).status().message() ==
        "unknown column \"0\": columns are numbered from 1 (to 1048576)");
  CHECK(ParseColumnRef("user_id", false).status().message() ==
        "unknown column \"user_id\": a column is named only by a header (set "
        "data.schema.header: true) or by its number");
}

TEST_CASE("a header's columns are found by name or number, with where a problem is",
          "[common][schema_columns]") {
  const HeaderColumns header("click,user,ad,user\r", ',');
  REQUIRE(header.size() == 4);
  CHECK(header.name(3) == "user");
  CHECK(header.byte_column(0) == 1);
  CHECK(header.byte_column(2) == 12);
  CHECK(header.Describe() == "click, user, ad, user");
  CHECK(header.Describe(8) == "click, u...");

  ColumnRef ad;
  ad.name = "ad";
  CHECK(header.Find(ad).value() == 2);
  ColumnRef third;
  third.index = 2;
  CHECK(header.Find(third).value() == 2);

  int where = 0;
  ColumnRef user;
  user.name = "user";
  absl::StatusOr<int> found = header.Find(user, &where);
  CHECK(found.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(found.status().message() == "the header names column \"user\" twice (columns 2 and 4)");
  CHECK(where == 15);

  ColumnRef price;
  price.name = "price";
  found = header.Find(price, &where);
  CHECK(found.status().code() == absl::StatusCode::kNotFound);
  CHECK(found.status().message() == "the header has no column \"price\"");
  CHECK(where == 1);

  ColumnRef fifth;
  fifth.index = 4;
  found = header.Find(fifth, &where);
  CHECK(found.status().code() == absl::StatusCode::kOutOfRange);
  CHECK(found.status().message() == "the header has 4 columns; the schema reads column 5");
  CHECK(where == 19);  // one past "click,user,ad,user"
}

TEST_CASE("an empty header line names one empty column", "[common][schema_columns]") {
  const HeaderColumns header("", '\t');
  CHECK(header.size() == 1);
  CHECK(header.name(0).empty());
  ColumnRef second;
  second.index = 1;
  int where = 0;
  CHECK(header.Find(second, &where).status().code() == absl::StatusCode::kOutOfRange);
  CHECK(where == 1);
}

TEST_CASE("the schema's delimiter is a tab or a comma", "[common][schema_columns]") {
  config::Schema schema;
  CHECK(DelimiterOf(schema) == '\t');
  schema.set_delimiter(config::Schema::COMMA);
  CHECK(DelimiterOf(schema) == ',');
}

}  // namespace
}  // namespace ps
