#include "common/job_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/schema_columns.h"
#include "common/status_macros.h"

namespace ps {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::TextFormat;

constexpr uint32_t kMaxDim = 4096;
// The largest dim of a table whose weights are FP16 or BF16 (Table.value_type).
constexpr uint32_t kMaxCompactDim = 1024;
constexpr uint32_t kMaxShards = 65536;
// training.row_cache.max_rows: slots are 32-bit, and the index has twice as many.
constexpr uint64_t kMaxRowCacheRows = uint64_t{1} << 30;
// training.row_cache.min_pulls: the sketch's counters are 4 bits (AdmissionSketch::kMaxCount).
constexpr uint32_t kMaxRowCacheMinPulls = 15;
constexpr uint32_t kMinMessageBytes = 1u << 20;
constexpr uint32_t kMaxMessageBytes = 1u << 30;

// Collects the first syntax error with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (has_error_) return;
    has_error_ = true;
    line_ = line;
    column_ = column;
    message_ = message;
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}

  bool has_error() const { return has_error_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  bool has_error_ = false;
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

// Where a message of the job was written in the file: the position of its field in the parent and
// the parse-info subtree of its own fields. Without a tree (a job built in code) positions are
// absent.
struct Where {
  const TextFormat::ParseInfoTree* tree = nullptr;
  int line = -1;     // 0-based, -1: unknown
  int column = -1;   // 0-based
  std::string path;  // e.g. `tables[1] "item"`
};

const FieldDescriptor* Field(const Message& msg, const char* name) {
  const FieldDescriptor* f = msg.GetDescriptor()->FindFieldByName(name);
  if (f == nullptr) {
    // A typo in this file, not a user error.
    std::fprintf(stderr, "job_config: no field %s in %s\n", name,
                 msg.GetDescriptor()->full_name().c_str());
    std::abort();
  }
  return f;
}

// The location of the nested message `msg.name[index]` (index -1: not repeated).
Where Nested(const Where& parent, const Message& msg, const char* name, int index,
             const std::string& label) {
  Where w;
  w.path = parent.path.empty() ? label : absl::StrCat(parent.path, ".", label);
  w.line = parent.line;
  w.column = parent.column;
  if (parent.tree != nullptr) {
    const FieldDescriptor* f = Field(msg, name);
    const auto loc = parent.tree->GetLocation(f, index);
    if (loc.line >= 0) {
      w.line = loc.line;
      w.column = loc.column;
    }
    w.tree = parent.tree->GetTreeForNested(f, index);
  }
  return w;
}

// Builds the errors of one message; `path` is the file name, or empty for jobs built in code.
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  // The error for field `name` of `msg` (the message itself when the field was not written).
  // `index` picks the element of a repeated field.
  absl::Status Error(const Where& where, const Message& msg, const char* name,
                     const std::string& what, int index = 0) const {
    int line = where.line;
    int column = where.column;
    if (where.tree != nullptr && name != nullptr) {
      const FieldDescriptor* f = Field(msg, name);
      auto loc = where.tree->GetLocation(f, f->is_repeated() ? index : -1);
      // Elements of a list written as `[a, b]` share the list's position.
      if (loc.line < 0 && f->is_repeated()) loc = where.tree->GetLocation(f, 0);
      if (loc.line >= 0) {
        line = loc.line;
        column = loc.column;
      }
    }
    std::string subject = where.path;
    if (name != nullptr) subject = subject.empty() ? name : absl::StrCat(subject, ".", name);
    std::string prefix;
    if (path_.empty()) {
      prefix = "job: ";
    } else if (line >= 0) {
      prefix = absl::StrFormat("%s:%d:%d: ", path_, line + 1, column + 1);
    } else {
      prefix = absl::StrFormat("%s:1:1: ", path_);
    }
    return absl::InvalidArgumentError(absl::StrCat(prefix, subject, ": ", what));
  }

 private:
  std::string path_;
};


bool Finite(float x) { return std::isfinite(x); }

// Whether `text` names a column by number ("3"), and that number is in range; a name otherwise,
// which needs a header.
absl::Status CheckColumn(const Checker& c, const Where& w, const Message& msg, const char* name,
                         const std::string& text, bool header) {
  const absl::StatusOr<ColumnRef> ref = ParseColumnRef(text, header);
  if (!ref.ok()) return c.Error(w, msg, name, std::string(ref.status().message()));
  return absl::OkStatus();
}

const config::Table* TableNamed(const config::Job& job, const std::string& name) {
  for (const config::Table& t : job.tables()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// The model's family, knobs and tables, and data.schema's columns and fields, against each other.
absl::Status CheckModelAndSchema(const Checker& c, const Where& root, const config::Job& job,
                                 const absl::flat_hash_set<std::string>& names) {
  const config::Model& m = job.model();
  const Where w = Nested(root, job, "model", -1, "model");
  const config::Data& d = job.data();
  const Where dw = Nested(root, job, "data", -1, "data");
  const bool has_schema = d.has_schema();
  const std::string family = config::Model::Type_Name(m.type());
  if (m.has_shared_table() && !names.contains(m.shared_table())) {
    return c.Error(w, m, "shared_table",
                   absl::StrFormat("no table named \"%s\"", m.shared_table()));
  }
  // Knobs of another family would do nothing: refused.
  if (m.type() != config::Model::DLRM) {
    if (m.bottom_mlp_size() > 0) {
      return c.Error(w, m, "bottom_mlp", absl::StrCat("is DLRM's; a ", family, " model has none"));
    }
    if (m.has_dot_interaction()) {
      return c.Error(w, m, "dot_interaction",
                     absl::StrCat("is DLRM's; a ", family, " model has none"));
    }
  }
  if (m.type() != config::Model::DCN_V2) {
    if (m.has_cross_layers()) {
      return c.Error(w, m, "cross_layers",
                     absl::StrCat("is DCN_V2's; a ", family, " model has none"));
    }
    if (m.has_cross_rank()) {
      return c.Error(w, m, "cross_rank",
                     absl::StrCat("is DCN_V2's; a ", family, " model has none"));
    }
  } else if (m.cross_layers() < 1 || m.cross_layers() > 16) {
    return c.Error(w, m, "cross_layers", absl::StrCat("must be 1 to 16, got ", m.cross_layers()));
  }
  if (m.type() != config::Model::WIDE_DEEP && m.wide_size() > 0) {
    return c.Error(w, m, "wide", absl::StrCat("is WIDE_DEEP's; a ", family, " model has none"));
  }
  const bool linear = m.type() == config::Model::WIDE_DEEP || m.type() == config::Model::DEEPFM;
  if (linear) {
    if (!m.has_linear_table()) {
      return c.Error(w, m, nullptr,
                     absl::StrCat("a ", family, " model needs linear_table (a table of dim 1)"));
    }
    const config::Table* t = TableNamed(job, m.linear_table());
    if (t == nullptr) {
      return c.Error(w, m, "linear_table",
                     absl::StrFormat("no table named \"%s\"", m.linear_table()));
    }
    if (t->dim() != 1) {
      return c.Error(w, m, "linear_table",
                     absl::StrFormat("table \"%s\" has dim %d; the linear weights need dim 1",
                                     m.linear_table(), t->dim()));
    }
    if (m.type() == config::Model::WIDE_DEEP && m.wide_size() == 0) {
      return c.Error(w, m, nullptr, "a WIDE_DEEP model needs at least one wide feature");
    }
  } else if (m.has_linear_table()) {
    return c.Error(w, m, "linear_table",
                   absl::StrCat("is WIDE_DEEP's and DEEPFM's; a ", family, " model has none"));
  }

  // The fields, their tables and whether they are multi-valued.
  std::vector<std::string> field_names;
  std::vector<bool> multi;
  if (!has_schema) {
    if (!m.has_shared_table() &&
        static_cast<uint32_t>(job.tables_size()) < m.num_sparse_features()) {
      return c.Error(
          w, m, "num_sparse_features",
          absl::StrFormat("%d sparse features need %d tables (or a shared_table), the "
                          "job has %d",
                          m.num_sparse_features(), m.num_sparse_features(), job.tables_size()));
    }
    for (uint32_t f = 1; f <= m.num_sparse_features(); ++f) {
      field_names.push_back(absl::StrCat("C", f));
      multi.push_back(false);
    }
  } else {
    const config::Schema& s = d.schema();
    const Where sw = Nested(dw, d, "schema", -1, "schema");
    if (d.format() == config::Data::CRITEO) {
      return c.Error(dw, d, "schema",
                     "format CRITEO is a preset schema of its own: set format: DELIMITED (or "
                     "BINARY) to read data with this schema");
    }
    if (m.has_num_dense_features() && m.num_dense_features() != uint32_t(s.dense_size())) {
      return c.Error(w, m, "num_dense_features",
                     absl::StrFormat("is %d but data.schema has %d dense columns (leave it unset)",
                                     m.num_dense_features(), s.dense_size()));
    }
    if (m.has_num_sparse_features() && m.num_sparse_features() != uint32_t(s.sparse_size())) {
      return c.Error(w, m, "num_sparse_features",
                     absl::StrFormat("is %d but data.schema has %d sparse fields (leave it unset)",
                                     m.num_sparse_features(), s.sparse_size()));
    }
    if (!s.has_label()) return c.Error(sw, s, nullptr, "needs the label's column");
    PS_RETURN_IF_ERROR(CheckColumn(c, sw, s, "label", s.label(), s.header()));
    for (int i = 0; i < s.dense_size(); ++i) {
      const config::DenseColumn& col = s.dense(i);
      const Where cw = Nested(sw, s, "dense", i, absl::StrCat("dense[", i, "]"));
      if (!col.has_column()) return c.Error(cw, col, nullptr, "needs its column");
      PS_RETURN_IF_ERROR(CheckColumn(c, cw, col, "column", col.column(), s.header()));
      if (col.transform() == config::DenseColumn::STANDARDIZE) {
        if (col.has_mean() != col.has_stddev()) {
          return c.Error(cw, col, col.has_mean() ? "mean" : "stddev",
                         "STANDARDIZE takes both mean and stddev, or neither (then they are "
                         "computed from the training data before the run)");
        }
        if (!col.has_mean()) continue;  // computed (common/dense_moments.h)
        if (!(col.stddev() > 0) || !Finite(col.stddev()) || !Finite(col.mean())) {
          return c.Error(cw, col, col.has_stddev() ? "stddev" : "transform",
                         "STANDARDIZE needs a finite mean and a stddev > 0");
        }
      } else if (col.has_mean() || col.has_stddev()) {
        return c.Error(cw, col, col.has_mean() ? "mean" : "stddev",
                       "is used only by transform STANDARDIZE");
      }
    }
    absl::flat_hash_set<std::string> seen;
    for (int i = 0; i < s.sparse_size(); ++i) {
      const config::SparseField& f = s.sparse(i);
      const Where fw = Nested(sw, s, "sparse", i, absl::StrCat("sparse[", i, "]"));
      if (!f.has_column()) return c.Error(fw, f, nullptr, "needs its column");
      PS_RETURN_IF_ERROR(CheckColumn(c, fw, f, "column", f.column(), s.header()));
      const std::string name = f.has_name() ? f.name() : f.column();
      if (!seen.insert(name).second) {
        return c.Error(fw, f, f.has_name() ? "name" : "column",
                       absl::StrFormat("two sparse fields are named \"%s\"", name));
      }
      if (f.has_table()) {
        if (!names.contains(f.table())) {
          return c.Error(fw, f, "table", absl::StrFormat("no table named \"%s\"", f.table()));
        }
      } else if (!m.has_shared_table()) {
        return c.Error(fw, f, nullptr, "names no table (set its table, or model.shared_table)");
      }
      if (f.has_separator()) {
        const char delimiter = s.delimiter() == config::Schema::COMMA ? ',' : '\t';
        if (f.separator().size() != 1 || f.separator()[0] == delimiter ||
            f.separator()[0] == '\n' || f.separator()[0] == '\r') {
          return c.Error(fw, f, "separator",
                         "must be one character, other than the delimiter and line ends");
        }
        if (f.max_values() < 1 || f.max_values() > 65536) {
          return c.Error(fw, f, "max_values",
                         absl::StrCat("must be 1 to 65536, got ", f.max_values()));
        }
      } else {
        const char* extra = f.has_max_values() ? "max_values"
                            : f.has_overflow() ? "overflow"
                            : f.has_pooling()  ? "pooling"
                                               : nullptr;
        if (extra != nullptr) {
          return c.Error(fw, f, extra,
                         "is for multi-valued fields; this one has no separator (one value)");
        }
      }
      field_names.push_back(name);
      multi.push_back(f.has_separator());
    }
  }
  const bool any_multi = std::find(multi.begin(), multi.end(), true) != multi.end();
  if (m.has_pooling() && !any_multi) {
    // A setting that would do nothing: refused rather than ignored.
    return c.Error(w, m, "pooling",
                   "has no effect: no field is multi-valued (data.schema's sparse fields with a "
                   "separator), and SUM and MEAN pool one value alike");
  }
  for (int i = 0; i < m.wide_size(); ++i) {
    const config::Model::WideFeature& wf = m.wide(i);
    const Where ww = Nested(w, m, "wide", i, absl::StrCat("wide[", i, "]"));
    if (wf.fields_size() < 1 || wf.fields_size() > 16) {
      return c.Error(ww, wf, nullptr, "a wide feature has 1 to 16 fields");
    }
    for (int j = 0; j < wf.fields_size(); ++j) {
      const auto it = std::find(field_names.begin(), field_names.end(), wf.fields(j));
      if (it == field_names.end()) {
        return c.Error(ww, wf, "fields",
                       absl::StrFormat("no sparse field named \"%s\"", wf.fields(j)), j);
      }
      if (wf.fields_size() > 1 && multi[it - field_names.begin()]) {
        return c.Error(ww, wf, "fields",
                       absl::StrFormat("crosses multi-valued field \"%s\"; crosses take "
                                       "single-valued fields",
                                       wf.fields(j)),
                       j);
      }
    }
  }
  // Dims the family needs to agree.
  std::vector<std::pair<std::string, uint32_t>> dims;  // per field: table, dim
  for (size_t f = 0; f < field_names.size(); ++f) {
    std::string table;
    if (has_schema && d.schema().sparse(f).has_table()) {
      table = d.schema().sparse(f).table();
    } else if (m.has_shared_table()) {
      table = m.shared_table();
    } else {
      table = job.tables(f).name();
    }
    const config::Table* t = TableNamed(job, table);
    dims.emplace_back(table, t == nullptr ? 0 : t->dim());
  }
  const bool same =
      (m.type() == config::Model::DLRM && m.dot_interaction()) || m.type() == config::Model::DEEPFM;
  for (size_t f = 1; same && f < dims.size(); ++f) {
    if (dims[f].second != dims[0].second) {
      return c.Error(w, m, m.type() == config::Model::DEEPFM ? "type" : "dot_interaction",
                     absl::StrFormat("needs every field's table to have one dim; \"%s\" has %d "
                                     "and \"%s\" has %d",
                                     dims[0].first, dims[0].second, dims[f].first, dims[f].second));
    }
  }
  if (m.type() == config::Model::DLRM && m.bottom_mlp_size() > 0 && !dims.empty()) {
    bool uniform = true;
    for (const auto& d2 : dims) uniform = uniform && d2.second == dims[0].second;
    if (uniform && m.bottom_mlp(m.bottom_mlp_size() - 1) != dims[0].second) {
      return c.Error(w, m, "bottom_mlp",
                     absl::StrFormat("must end with the fields' embedding dim %d, got %d",
                                     dims[0].second, m.bottom_mlp(m.bottom_mlp_size() - 1)),
                     m.bottom_mlp_size() - 1);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOptimizer(const Checker& c, const Where& w, const config::Optimizer& o) {
  if (!IsKnownOptimizer(o.type())) {
    return c.Error(w, o, "type",
                   absl::StrFormat("unknown optimizer \"%s\" (expected sgd, adagrad, "
                                   "rowwise_adagrad, adam or ftrl)",
                                   o.type()));
  }
  if (!Finite(o.learning_rate()) || o.learning_rate() <= 0) {
    return c.Error(w, o, "learning_rate",
                   absl::StrCat("must be a positive number, got ", o.learning_rate()));
  }
  const bool adagrad = o.type() == "adagrad" || o.type() == "rowwise_adagrad";
  if (adagrad && !(o.initial_accumulator() > 0)) {
    return c.Error(w, o, "initial_accumulator",
                   absl::StrCat("must be > 0 for ", o.type(), ", got ", o.initial_accumulator()));
  }
  if ((adagrad || o.type() == "adam") && !(o.epsilon() > 0)) {
    return c.Error(w, o, "epsilon", absl::StrCat("must be > 0, got ", o.epsilon()));
  }
  if (o.type() == "adam") {
    if (!(o.beta1() >= 0 && o.beta1() < 1)) {
      return c.Error(w, o, "beta1", absl::StrCat("must be in [0, 1), got ", o.beta1()));
    }
    if (!(o.beta2() >= 0 && o.beta2() < 1)) {
      return c.Error(w, o, "beta2", absl::StrCat("must be in [0, 1), got ", o.beta2()));
    }
  }
  if (!Finite(o.l2()) || !(o.l2() >= 0)) {
    return c.Error(w, o, "l2", absl::StrCat("must be >= 0, got ", o.l2()));
  }
  if (o.type() != "ftrl") {
    // ftrl's own settings would do nothing here: refused rather than ignored.
    const char* field = o.has_l1()          ? "l1"
                        : o.has_ftrl_beta() ? "ftrl_beta"
                        : o.has_lr_power()  ? "lr_power"
                                            : nullptr;
    if (field != nullptr) {
      return c.Error(w, o, field,
                     absl::StrFormat("is a setting of ftrl, not of %s (weight decay is l2)",
                                     o.type()));
    }
  }
  if (o.type() == "ftrl") {
    if (!(o.l1() >= 0)) return c.Error(w, o, "l1", absl::StrCat("must be >= 0, got ", o.l1()));
    if (!(o.ftrl_beta() >= 0)) {
      return c.Error(w, o, "ftrl_beta", absl::StrCat("must be >= 0, got ", o.ftrl_beta()));
    }
    if (!(o.lr_power() <= 0)) {
      return c.Error(w, o, "lr_power", absl::StrCat("must be <= 0, got ", o.lr_power()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInitializer(const Checker& c, const Where& w, const config::Initializer& init) {
  switch (init.kind()) {
    case config::Initializer::ZEROS:
      return absl::OkStatus();
    case config::Initializer::UNIFORM:
      if (!Finite(init.low()) || !Finite(init.high()) || !(init.low() < init.high())) {
        return c.Error(w, init, "high",
                       absl::StrFormat("uniform needs low < high, got low %g high %g", init.low(),
                                       init.high()));
      }
      return absl::OkStatus();
    case config::Initializer::NORMAL:
    case config::Initializer::TRUNCATED_NORMAL:
      if (!Finite(init.mean())) {
        return c.Error(w, init, "mean", absl::StrCat("must be finite, got ", init.mean()));
      }
      if (!Finite(init.stddev()) || !(init.stddev() > 0)) {
        return c.Error(w, init, "stddev", absl::StrCat("must be > 0, got ", init.stddev()));
      }
      return absl::OkStatus();
  }
  return c.Error(w, init, "kind", "unknown initializer kind");
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
    if (!ok) return false;
  }
  return true;
}

absl::Status CheckJob(const Checker& c, const Where& root, const config::Job& job) {
  // Tables.
  if (job.tables_size() == 0)
    return c.Error(root, job, "tables", "the job needs at least one table");
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < job.tables_size(); ++i) {
    const config::Table& t = job.tables(i);
    const std::string label = t.has_name() ? absl::StrFormat("tables[%d] \"%s\"", i, t.name())
                                           : absl::StrFormat("tables[%d]", i);
    const Where w = Nested(root, job, "tables", i, label);
    if (!t.has_name()) return c.Error(w, t, nullptr, "missing name");
    if (!ValidName(t.name())) {
      return c.Error(w, t, "name",
                     "name must be 1 to 128 characters of letters, digits, '_', '-' or '.'");
    }
    if (!names.insert(t.name()).second) {
      return c.Error(w, t, "name", absl::StrFormat("duplicate table name \"%s\"", t.name()));
    }
    if (!t.has_dim()) return c.Error(w, t, nullptr, "missing dim");
    if (t.dim() < 1 || t.dim() > kMaxDim) {
      return c.Error(w, t, "dim",
                     absl::StrFormat("dim must be between 1 and %d, got %d", kMaxDim, t.dim()));
    }
    PS_RETURN_IF_ERROR(
        CheckInitializer(c, Nested(w, t, "initializer", -1, "initializer"), t.initializer()));
    PS_RETURN_IF_ERROR(
        CheckOptimizer(c, Nested(w, t, "optimizer", -1, "optimizer"), t.optimizer()));
    if (t.has_admission()) {
      const config::Admission& a = t.admission();
      const Where aw = Nested(w, t, "admission", -1, "admission");
      if (a.min_count() < 1 || a.min_count() > 15) {
        return c.Error(aw, a, "min_count",
                       absl::StrFormat("min_count must be between 1 and 15 (the sketch's counters "
                                       "are 4 bits), got %d",
                                       a.min_count()));
      }
      if (!(a.probability() > 0.0f && a.probability() <= 1.0f)) {
        return c.Error(aw, a, "probability",
                       absl::StrFormat("probability must be in (0, 1], got %g", a.probability()));
      }
      if (a.min_count() == 1 && a.probability() == 1.0f) {
        return c.Error(aw, a, nullptr,
                       "admits every id (min_count 1, probability 1): set min_count above 1 or "
                       "probability below 1, or remove admission");
      }
    }
    if (t.has_eviction()) {
      const config::Eviction& e = t.eviction();
      const Where ew = Nested(w, t, "eviction", -1, "eviction");
      if (e.ttl_steps() > 0 && e.ttl_seconds() > 0) {
        return c.Error(ew, e, "ttl_seconds", "set at most one of ttl_steps and ttl_seconds");
      }
    }
    if (!(t.memory_weight() > 0.0f) || !std::isfinite(t.memory_weight())) {
      return c.Error(w, t, "memory_weight",
                     absl::StrFormat("memory_weight must be > 0, got %g", t.memory_weight()));
    }
    // Compact weights are for large tables of small rows (the memory they save is 2 bytes a
    // weight), and a push decodes a row's weights into per-thread scratch of dim floats (a new
    // row's initial weights too): the limit keeps that scratch small and states where the
    // feature stops.
    if (t.value_type() != config::Table::FP32 && t.dim() > kMaxCompactDim) {
      return c.Error(w, t, "value_type",
                     absl::StrFormat("value_type %s needs dim <= %d, got %d",
                                     config::Table::ValueType_Name(t.value_type()), kMaxCompactDim,
                                     t.dim()));
    }
  }

  // Model.
  if (job.has_model()) {
    const config::Model& m = job.model();
    const Where w = Nested(root, job, "model", -1, "model");
    for (int i = 0; i < m.bottom_mlp_size(); ++i) {
      if (m.bottom_mlp(i) == 0) {
        return c.Error(w, m, "bottom_mlp", "layer sizes must be > 0", i);
      }
    }
    for (int i = 0; i < m.top_mlp_size(); ++i) {
      if (m.top_mlp(i) == 0) return c.Error(w, m, "top_mlp", "layer sizes must be > 0", i);
    }
    PS_RETURN_IF_ERROR(CheckModelAndSchema(c, root, job, names));
  }
  if (!job.has_model() && job.data().has_schema()) {
    PS_RETURN_IF_ERROR(CheckModelAndSchema(c, root, job, names));
  }

  // Data.
  if (job.has_data()) {
    const config::Data& d = job.data();
    const Where w = Nested(root, job, "data", -1, "data");
    for (int i = 0; i < d.train_paths_size(); ++i) {
      if (d.train_paths(i).empty()) return c.Error(w, d, "train_paths", "empty path", i);
    }
    for (int i = 0; i < d.eval_paths_size(); ++i) {
      if (d.eval_paths(i).empty()) return c.Error(w, d, "eval_paths", "empty path", i);
    }
    if (d.format() == config::Data::DELIMITED && !d.has_schema()) {
      return c.Error(w, d, "format", "DELIMITED data needs a schema");
    }
  }

  // Training.
  const config::Training& tr = job.training();
  const Where wt = Nested(root, job, "training", -1, "training");
  if (tr.staleness() < 0) {
    return c.Error(wt, tr, "staleness", absl::StrCat("must be >= 0, got ", tr.staleness()));
  }
  if (!(tr.sync_quorum() > 0 && tr.sync_quorum() <= 1)) {
    return c.Error(wt, tr, "sync_quorum",
                   absl::StrCat("must be in (0, 1], got ", tr.sync_quorum()));
  }
  if (tr.sync_timeout_ms() == 0) return c.Error(wt, tr, "sync_timeout_ms", "must be > 0");
  if (tr.batch_size() == 0) return c.Error(wt, tr, "batch_size", "must be > 0");
  if (tr.dense_sync_every() == 0) return c.Error(wt, tr, "dense_sync_every", "must be >= 1");
  if (tr.steps() > 0 && tr.epochs() > 0) {
    return c.Error(wt, tr, "epochs", "set steps or epochs, not both");
  }
  if (tr.has_dense_optimizer()) {
    const Where wd = Nested(wt, tr, "dense_optimizer", -1, "dense_optimizer");
    PS_RETURN_IF_ERROR(CheckOptimizer(c, wd, tr.dense_optimizer()));
    if (tr.dense_optimizer().type() == "rowwise_adagrad") {
      // Its one accumulator a row would be one a chunk of cluster.dense_chunk_floats on the
      // servers and one for the whole model on a worker: results set by a transport setting.
      return c.Error(wd, tr.dense_optimizer(), "type",
                     "rowwise_adagrad is for embedding tables, not dense parameters (dense "
                     "parameters have no rows: use adagrad)");
    }
  }
  if (tr.eval_every_epochs() > 0 && tr.eval_every_steps() > 0) {
    return c.Error(wt, tr, "eval_every_steps", "set eval_every_epochs or eval_every_steps, not both");
  }
  const bool evaluates = tr.eval_every_epochs() > 0 || tr.eval_every_steps() > 0;
  if (evaluates && job.data().eval_paths_size() == 0) {
    return c.Error(wt, tr, tr.eval_every_epochs() > 0 ? "eval_every_epochs" : "eval_every_steps",
                   "evaluating during training needs data.eval_paths");
  }
  if (tr.has_early_stopping()) {
    const config::EarlyStopping& es = tr.early_stopping();
    const Where we = Nested(wt, tr, "early_stopping", -1, "early_stopping");
    if (!evaluates) {
      return c.Error(wt, tr, "early_stopping",
                     "needs training.eval_every_epochs or eval_every_steps (it stops on the "
                     "held-out metric of those evaluations)");
    }
    if (es.patience() == 0) return c.Error(we, es, "patience", "must be >= 1");
    if (!Finite(es.min_delta()) || !(es.min_delta() >= 0)) {
      return c.Error(we, es, "min_delta", absl::StrCat("must be >= 0, got ", es.min_delta()));
    }
    if (es.restore_best() && job.cluster().checkpoint_dir().empty()) {
      return c.Error(we, es, "restore_best",
                     "keeping the best model needs cluster.checkpoint_dir (it is kept in a "
                     "checkpoint); set restore_best: false to keep the last model instead");
    }
    const config::Cluster& cluster = job.cluster();
    if (es.restore_best() && tr.mode() == config::Training::SYNC &&
        (cluster.checkpoint_every_steps() > 0 || cluster.checkpoint_every_seconds() > 0)) {
      // A periodic checkpoint under way waits for the workers' states, which they give only
      // after the evaluation that waits for the best model's checkpoint (worker/README.md).
      return c.Error(we, es, "restore_best",
                     "in a SYNC job, keeping the best model cannot be combined with periodic "
                     "checkpoints (cluster.checkpoint_every_steps or checkpoint_every_seconds): "
                     "set restore_best: false, or drop the periodic checkpoints");
    }
  }

  if (tr.has_row_cache()) {
    const config::RowCache& rc = tr.row_cache();
    const Where wr = Nested(wt, tr, "row_cache", -1, "row_cache");
    if (tr.mode() == config::Training::SYNC) {
      return c.Error(wt, tr, "row_cache",
                     "not in SYNC training: rows served from the cache would miss pushes of "
                     "earlier steps, and a SYNC pull must see exactly those (use "
                     "BOUNDED_STALENESS or ASYNC)");
    }
    if (rc.max_rows() < 1 || rc.max_rows() > kMaxRowCacheRows) {
      return c.Error(
          wr, rc, "max_rows",
          absl::StrFormat("must be between 1 and %d, got %d", kMaxRowCacheRows, rc.max_rows()));
    }
    if (rc.refresh_steps() < 1) return c.Error(wr, rc, "refresh_steps", "must be >= 1");
    if (rc.min_pulls() < 1 || rc.min_pulls() > kMaxRowCacheMinPulls) {
      return c.Error(wr, rc, "min_pulls",
                     absl::StrFormat("must be between 1 and %d, got %d", kMaxRowCacheMinPulls,
                                     rc.min_pulls()));
    }
    if (tr.mode() == config::Training::BOUNDED_STALENESS &&
        static_cast<int64_t>(rc.refresh_steps()) > tr.staleness()) {
      return c.Error(wr, rc, "refresh_steps",
                     absl::StrFormat("must be at most training.staleness (%d) in "
                                     "BOUNDED_STALENESS, got %d: a cached row may be that many "
                                     "steps old, and the bound allows only staleness",
                                     tr.staleness(), rc.refresh_steps()));
    }
  }

  // Cluster.
  const config::Cluster& cl = job.cluster();
  const Where wc = Nested(root, job, "cluster", -1, "cluster");
  if (cl.num_shards() < 1 || cl.num_shards() > kMaxShards) {
    return c.Error(
        wc, cl, "num_shards",
        absl::StrFormat("must be between 1 and %d, got %d", kMaxShards, cl.num_shards()));
  }
  if (cl.num_servers() < 1) return c.Error(wc, cl, "num_servers", "must be >= 1");
  if (cl.num_workers() < 1) return c.Error(wc, cl, "num_workers", "must be >= 1");
  if (cl.num_servers() > cl.num_shards()) {
    return c.Error(wc, cl, "num_servers",
                   absl::StrFormat("%d servers cannot share %d shards: need num_shards >= "
                                   "num_servers",
                                   cl.num_servers(), cl.num_shards()));
  }
  if (cl.replication_factor() < 1 || cl.replication_factor() > cl.num_servers()) {
    return c.Error(wc, cl, "replication_factor",
                   absl::StrFormat("must be between 1 and num_servers (%d), got %d",
                                   cl.num_servers(), cl.replication_factor()));
  }
  if (cl.read_from_replicas()) {
    if (cl.replication_factor() < 2) {
      return c.Error(wc, cl, "read_from_replicas", "needs replication_factor > 1");
    }
    if (job.training().mode() == config::Training::SYNC) {
      return c.Error(wc, cl, "read_from_replicas",
                     "not in SYNC training: a sync pull must see its step applied, which only the "
                     "primary knows");
    }
    if (job.training().mode() == config::Training::BOUNDED_STALENESS &&
        cl.replication_mode() == config::Cluster::ASYNC) {
      return c.Error(wc, cl, "read_from_replicas",
                     "BOUNDED_STALENESS reads from replicas need SYNC replication (an ASYNC "
                     "replica may miss pushes the staleness bound promises)");
    }
  }
  if (cl.has_replication_mode() && cl.replication_factor() == 1 &&
      cl.replication_mode() == config::Cluster::ASYNC) {
    return c.Error(wc, cl, "replication_mode",
                   "ASYNC replication needs replication_factor > 1 (there are no replicas)");
  }
  if (cl.checkpoint_every_steps() > 0 && cl.checkpoint_dir().empty()) {
    return c.Error(wc, cl, "checkpoint_every_steps", "checkpoints need a checkpoint_dir");
  }
  if (cl.checkpoint_every_seconds() > 0 && cl.checkpoint_dir().empty()) {
    return c.Error(wc, cl, "checkpoint_every_seconds", "checkpoints need a checkpoint_dir");
  }
  if (cl.checkpoint_keep() < 1) return c.Error(wc, cl, "checkpoint_keep", "must be >= 1");
  if (cl.checkpoint_full_every() < 1) {
    return c.Error(wc, cl, "checkpoint_full_every", "must be >= 1 (1: every checkpoint is full)");
  }
  if (cl.has_checkpoint_dir() && !absl::StartsWith(cl.checkpoint_dir(), "/")) {
    return c.Error(wc, cl, "checkpoint_dir", "must be an absolute path");
  }
  if (cl.has_restore_from() && !absl::StartsWith(cl.restore_from(), "/")) {
    return c.Error(wc, cl, "restore_from", "must be an absolute path");
  }
  if (cl.resume() && cl.has_restore_from()) {
    return c.Error(wc, cl, "resume",
                   "set one of resume (the newest checkpoint in checkpoint_dir) and restore_from");
  }
  if (cl.resume() && cl.checkpoint_dir().empty()) {
    return c.Error(wc, cl, "resume", "resuming needs a checkpoint_dir to resume from");
  }
  if (cl.max_message_bytes() < kMinMessageBytes || cl.max_message_bytes() > kMaxMessageBytes) {
    return c.Error(wc, cl, "max_message_bytes",
                   absl::StrFormat("must be between %d and %d, got %d", kMinMessageBytes,
                                   kMaxMessageBytes, cl.max_message_bytes()));
  }
  if (cl.dense_chunk_floats() == 0 ||
      uint64_t{cl.dense_chunk_floats()} * sizeof(float) > cl.max_message_bytes() / 2) {
    return c.Error(wc, cl, "dense_chunk_floats",
                   "must be > 0 and its bytes at most half of max_message_bytes");
  }
  return absl::OkStatus();
}

}  // namespace

void PointAtQuotedName(const std::string& text, const std::string& message, int* line,
                       int* column) {
  const size_t close = message.rfind('"');
  if (close == std::string::npos || close == 0) return;
  const size_t open = message.rfind('"', close - 1);
  if (open == std::string::npos || close == open + 1) return;
  const std::string name = message.substr(open + 1, close - open - 1);
  // Offset of (line, column) in text.
  size_t offset = 0;
  for (int l = 0; l < *line && offset < text.size(); ++l) {
    const size_t nl = text.find('\n', offset);
    if (nl == std::string::npos) return;
    offset = nl + 1;
  }
  offset = std::min(text.size(), offset + static_cast<size_t>(*column));
  const size_t at = text.rfind(name, offset);
  if (at == std::string::npos) return;
  int l = 0;
  size_t line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++l;
      line_start = i + 1;
    }
  }
  *line = l;
  *column = static_cast<int>(at - line_start);
}

bool IsKnownOptimizer(absl::string_view type) {
  return type == "sgd" || type == "adagrad" || type == "rowwise_adagrad" || type == "adam" ||
         type == "ftrl";
}

absl::StatusOr<config::Job> ParseJob(absl::string_view text, absl::string_view path) {
  config::Job job;
  TextFormat::Parser parser;
  FirstErrorCollector errors;
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  const std::string copy(text);
  if (!parser.ParseFromString(copy, &job)) {
    if (errors.has_error()) {
      int line = errors.line();
      int column = errors.column();
      PointAtQuotedName(copy, errors.message(), &line, &column);
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d:%d: %s", path, line + 1, column + 1, errors.message()));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ":1:1: cannot parse the job"));
  }
  const Checker checker{std::string(path)};
  Where root;
  root.tree = &tree;
  PS_RETURN_IF_ERROR(CheckJob(checker, root, job));
  return job;
}

absl::StatusOr<config::Job> LoadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such job file"));
    if (err == EACCES)
      return absl::PermissionDeniedError(absl::StrCat(path, ": permission denied"));
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::FailedPreconditionError(absl::StrCat(path, ": read error"));
  return ParseJob(buf.str(), path);
}

absl::Status ValidateJob(const config::Job& job) { return CheckJob(Checker(""), Where{}, job); }

std::string JobFieldPosition(absl::string_view text, absl::string_view path,
                             absl::string_view field_path, int index) {
  const std::string unknown(path);
  config::Job job;
  TextFormat::Parser parser;
  FirstErrorCollector errors;  // keeps protobuf's own reports off stderr
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(std::string(text), &job)) return unknown;
  const std::vector<std::string> names = absl::StrSplit(field_path, '.');
  const google::protobuf::Descriptor* descriptor = job.GetDescriptor();
  const TextFormat::ParseInfoTree* at = &tree;
  for (size_t i = 0; i < names.size(); ++i) {
    const FieldDescriptor* f = descriptor->FindFieldByName(names[i]);
    if (f == nullptr || at == nullptr) return unknown;
    if (i + 1 < names.size()) {
      if (f->message_type() == nullptr) return unknown;
      at = at->GetTreeForNested(f, f->is_repeated() ? 0 : -1);
      descriptor = f->message_type();
      continue;
    }
    auto loc = at->GetLocation(f, f->is_repeated() ? std::max(index, 0) : -1);
    if (loc.line < 0 && f->is_repeated()) loc = at->GetLocation(f, 0);
    if (loc.line < 0) return unknown;
    return absl::StrFormat("%s:%d:%d", path, loc.line + 1, loc.column + 1);
  }
  return unknown;
}

}  // namespace ps
