#include "worker/data/schema.h"

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/schema_columns.h"
#include "common/status_macros.h"

namespace ps {
namespace worker {

std::vector<std::string> FieldNames(const config::Job& job) {
  std::vector<std::string> names;
  if (job.data().has_schema()) {
    for (const config::SparseField& f : job.data().schema().sparse()) {
      names.push_back(f.has_name() ? f.name() : f.column());
    }
    return names;
  }
  for (uint32_t c = 1; c <= job.model().num_sparse_features(); ++c) {
    names.push_back(absl::StrCat("C", c));
  }
  return names;
}

absl::StatusOr<SchemaOptions> SchemaOf(const config::Job& job) {
  SchemaOptions options;
  const config::Data& data = job.data();
  if (!data.has_schema()) {
    if (data.format() == config::Data::DELIMITED) {
      return absl::InvalidArgumentError("data.format DELIMITED needs data.schema");
    }
    options.num_dense = static_cast<int>(job.model().num_dense_features());
    options.num_sparse = static_cast<int>(job.model().num_sparse_features());
    return options;
  }
  const config::Schema& s = data.schema();
  auto text = std::make_shared<TextSchema>();
  text->delimiter = DelimiterOf(s);
  text->header = s.header();
  if (!s.has_label()) return absl::InvalidArgumentError("data.schema.label: not set");
  PS_ASSIGN_OR_RETURN(text->label, ParseColumnRef(s.label(), s.header()));
  for (const config::DenseColumn& d : s.dense()) {
    DenseColumnSpec spec;
    PS_ASSIGN_OR_RETURN(spec.column, ParseColumnRef(d.column(), s.header()));
    spec.name = d.has_name() ? d.name() : d.column();
    switch (d.transform()) {
      case config::DenseColumn::NONE:
        spec.transform = DenseColumnSpec::Transform::kNone;
        break;
      case config::DenseColumn::LOG1P:
        spec.transform = DenseColumnSpec::Transform::kLog1p;
        break;
      case config::DenseColumn::STANDARDIZE:
        spec.transform = DenseColumnSpec::Transform::kStandardize;
        if (!d.has_mean() || !d.has_stddev() || !(d.stddev() > 0)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "dense column ", spec.name,
              ": STANDARDIZE needs its mean and a stddev > 0 (the coordinator computes them "
              "from the training data when the job file leaves both out: "
              "common/dense_moments.h)"));
        }
        spec.mean = d.mean();
        spec.stddev = d.stddev();
        break;
    }
    text->dense.push_back(std::move(spec));
  }
  for (const config::SparseField& f : s.sparse()) {
    SparseFieldSpec spec;
    PS_ASSIGN_OR_RETURN(spec.column, ParseColumnRef(f.column(), s.header()));
    spec.name = f.has_name() ? f.name() : f.column();
    if (f.has_separator()) {
      if (f.separator().size() != 1 || f.separator()[0] == text->delimiter ||
          f.separator()[0] == '\n' || f.separator()[0] == '\r') {
        return absl::InvalidArgumentError(
            absl::StrCat("sparse field ", spec.name,
                         ": the separator must be one character other than the delimiter"));
      }
      spec.separator = f.separator()[0];
    }
    if (f.max_values() < 1 || f.max_values() > 65536) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse field ", spec.name, ": max_values must be 1 to 65536"));
    }
    spec.max_values = static_cast<int>(f.max_values());
    spec.skip_overflow = f.overflow() == config::SparseField::SKIP;
    text->sparse.push_back(std::move(spec));
  }
  options.num_dense = static_cast<int>(text->dense.size());
  options.num_sparse = static_cast<int>(text->sparse.size());
  options.text = std::move(text);
  return options;
}

}  // namespace worker
}  // namespace ps
