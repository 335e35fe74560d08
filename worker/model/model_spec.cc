#include "worker/model/model_spec.h"

#include <numeric>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace worker {
namespace {

const config::Table* FindTable(const config::Job& job, const std::string& name) {
  for (const config::Table& t : job.tables()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// Whether a sparse field of the schema is called `name` (its name, else its column).
bool HasSparseField(const config::Schema& schema, const std::string& name) {
  for (const config::SparseField& f : schema.sparse()) {
    if ((f.has_name() ? f.name() : f.column()) == name) return true;
  }
  return false;
}

}  // namespace

int ModelSpec::emb_width() const {
  return std::accumulate(field_dims.begin(), field_dims.end(), 0) + num_linear;
}

absl::StatusOr<ModelSpec> ModelSpec::FromJob(const config::Job& job) {
  const config::Model& m = job.model();
  ModelSpec spec;
  spec.type = m.type();
  const std::string family = config::Model::Type_Name(m.type());
  const bool schema = job.data().has_schema();
  if (schema) {
    const config::Schema& s = job.data().schema();
    spec.num_dense = s.dense_size();
    if (m.has_num_dense_features() && m.num_dense_features() != uint32_t(s.dense_size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model.num_dense_features is %d but data.schema has %d dense columns",
                          m.num_dense_features(), s.dense_size()));
    }
    if (m.has_num_sparse_features() && m.num_sparse_features() != uint32_t(s.sparse_size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model.num_sparse_features is %d but data.schema has %d sparse fields",
                          m.num_sparse_features(), s.sparse_size()));
    }
  } else {
    spec.num_dense = static_cast<int>(m.num_dense_features());
  }
  const int num_fields =
      schema ? job.data().schema().sparse_size() : static_cast<int>(m.num_sparse_features());
  spec.field_dims.clear();
  for (int f = 0; f < num_fields; ++f) {
    std::string name;
    if (schema && job.data().schema().sparse(f).has_table()) {
      name = job.data().schema().sparse(f).table();
    } else if (m.has_shared_table()) {
      name = m.shared_table();
    } else if (!schema && f < job.tables_size()) {
      name = job.tables(f).name();
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("sparse field %d has no table (set its table or model.shared_table)", f));
    }
    const config::Table* t = FindTable(job, name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sparse field %d reads table \"%s\", which the job lacks", f, name));
    }
    spec.field_dims.push_back(static_cast<int>(t->dim()));
  }
  if (m.bottom_mlp_size() > 0) spec.bottom.assign(m.bottom_mlp().begin(), m.bottom_mlp().end());
  if (m.top_mlp_size() > 0) spec.top.assign(m.top_mlp().begin(), m.top_mlp().end());
  spec.dot_interaction = m.dot_interaction();
  spec.cross_layers = static_cast<int>(m.cross_layers());
  spec.cross_rank = static_cast<int>(m.cross_rank());

  const bool dlrm = m.type() == config::Model::DLRM;
  if (!dlrm && (m.bottom_mlp_size() > 0 || m.has_dot_interaction())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.bottom_mlp and model.dot_interaction are DLRM's; a %s model has none", family));
  }
  if (m.type() != config::Model::DCN_V2 && (m.has_cross_layers() || m.has_cross_rank())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.cross_layers and model.cross_rank are DCN_V2's; a %s model has none", family));
  }
  if (m.type() != config::Model::WIDE_DEEP && m.wide_size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model.wide is WIDE_DEEP's; a %s model has none", family));
  }
  const bool linear = m.type() == config::Model::WIDE_DEEP || m.type() == config::Model::DEEPFM;
  if (linear) {
    if (!m.has_linear_table()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a %s model needs model.linear_table (a table of dim 1)", family));
    }
    const config::Table* t = FindTable(job, m.linear_table());
    if (t == nullptr || t->dim() != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model.linear_table \"%s\" must name a table of dim 1", m.linear_table()));
    }
    spec.num_linear = m.type() == config::Model::DEEPFM ? num_fields : m.wide_size();
    if (m.type() == config::Model::WIDE_DEEP && m.wide_size() == 0) {
      return absl::InvalidArgumentError("a WIDE_DEEP model needs at least one model.wide feature");
    }
    for (int w = 0; w < m.wide_size(); ++w) {
      if (m.wide(w).fields_size() == 0) {
        return absl::InvalidArgumentError(absl::StrFormat("model.wide[%d] names no field", w));
      }
      for (const std::string& name : m.wide(w).fields()) {
        // Without a schema the fields are C1, C2, ... as Criteo's columns are named.
        const bool known =
            schema ? HasSparseField(job.data().schema(), name)
                   : absl::StartsWith(name, "C") && name.size() > 1 &&
                         name.find_first_not_of("0123456789", 1) == std::string::npos &&
                         std::stoi(name.substr(1)) >= 1 && std::stoi(name.substr(1)) <= num_fields;
        if (!known) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "model.wide[%d] names field \"%s\", which the job's sparse fields lack", w, name));
        }
      }
    }
  } else if (m.has_linear_table()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.linear_table is WIDE_DEEP's and DEEPFM's; a %s model has none", family));
  }
  const bool same_dims = (dlrm && spec.dot_interaction) || m.type() == config::Model::DEEPFM;
  if (same_dims) {
    for (int d : spec.field_dims) {
      if (d != spec.field_dims[0]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s needs every field's table to have the same dim; they have %d and %d",
            dlrm ? "model.dot_interaction" : "a DEEPFM model", spec.field_dims[0], d));
      }
    }
  }
  if (dlrm) {
    if (spec.num_dense < 1) {
      return absl::InvalidArgumentError("a DLRM model needs at least one dense feature");
    }
    if (spec.bottom.empty()) {
      return absl::InvalidArgumentError("a DLRM model needs model.bottom_mlp");
    }
    // The dim the bottom MLP must end in: the fields' common dim (required with dot_interaction;
    // kept as the rule whenever the fields agree, so the interaction can be switched on).
    bool uniform = !spec.field_dims.empty();
    for (int d : spec.field_dims) uniform = uniform && d == spec.field_dims[0];
    if ((uniform || spec.dot_interaction) && !spec.field_dims.empty() &&
        spec.bottom.back() != spec.field_dims[0]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model.bottom_mlp must end with the embedding dim %d", spec.field_dims[0]));
    }
  }
  if (m.type() == config::Model::DCN_V2 && (spec.cross_layers < 1 || spec.cross_layers > 16)) {
    return absl::InvalidArgumentError("model.cross_layers must be 1 to 16");
  }
  return spec;
}

}  // namespace worker
}  // namespace ps
