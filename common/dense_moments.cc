#include "common/dense_moments.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/data_paths.h"
#include "common/schema_columns.h"
#include "common/status_macros.h"
#include "common/text_lines.h"

namespace ps {
namespace {

bool Missing(const config::DenseColumn& d) {
  return d.transform() == config::DenseColumn::STANDARDIZE && !d.has_mean() && !d.has_stddev();
}

// A column's running moments (Welford), in double.
struct Moments {
  int64_t count = 0;
  double mean = 0;
  double m2 = 0;
  void Add(double x) {
    ++count;
    const double delta = x - mean;
    mean += delta / static_cast<double>(count);
    m2 += delta * (x - mean);
  }
};

}  // namespace

bool NeedsDenseMoments(const config::Job& job) {
  if (job.data().format() != config::Data::DELIMITED || !job.data().has_schema()) return false;
  for (const config::DenseColumn& d : job.data().schema().dense()) {
    if (Missing(d)) return true;
  }
  return false;
}

absl::Status FillDenseMoments(config::Job* job, const DenseMomentsOptions& options,
                              DenseMomentsReport* report) {
  *report = DenseMomentsReport();
  if (!NeedsDenseMoments(*job)) return absl::OkStatus();
  const config::Schema& schema = job->data().schema();
  const char delimiter = DelimiterOf(schema);
  std::vector<int> wanted;  // the dense columns to compute
  std::vector<ColumnRef> refs;
  for (int i = 0; i < schema.dense_size(); ++i) {
    if (!Missing(schema.dense(i))) continue;
    wanted.push_back(i);
    PS_ASSIGN_OR_RETURN(ColumnRef ref, ParseColumnRef(schema.dense(i).column(), schema.header()));
    refs.push_back(std::move(ref));
  }
  std::vector<Moments> moments(wanted.size());
  std::vector<int> index(wanted.size());
  std::vector<absl::string_view> cells;
  for (const std::string& pattern : job->data().train_paths()) {
    PS_ASSIGN_OR_RETURN(const std::vector<std::string> files, ExpandDataPath(pattern));
    for (const std::string& file : files) {
      if (report->lines_read >= options.max_lines) break;
      bool first = true;
      absl::Status bad;
      PS_RETURN_IF_ERROR(ForEachLine(file, [&](const std::string& line) {
        if (first) {
          first = false;
          if (!schema.header()) {
            for (size_t c = 0; c < refs.size(); ++c) index[c] = refs[c].index;
          } else {
            const HeaderColumns header(line, delimiter);
            for (size_t c = 0; c < refs.size(); ++c) {
              const absl::StatusOr<int> found = header.Find(refs[c]);
              if (!found.ok()) {
                bad = absl::InvalidArgumentError(
                    absl::StrCat(file, ":1: ", found.status().message()));
                return false;
              }
              index[c] = *found;
            }
            return true;
          }
        }
        ++report->lines_read;
        cells = absl::StrSplit(line, delimiter);
        std::vector<double> values(refs.size(), 0.0);
        for (size_t c = 0; c < refs.size(); ++c) {
          if (index[c] >= static_cast<int>(cells.size())) {
            ++report->lines_skipped;
            return report->lines_read < options.max_lines;
          }
          const absl::string_view cell = cells[index[c]];
          double v = 0;
          if (!cell.empty() && (!absl::SimpleAtod(cell, &v) || !std::isfinite(v))) {
            ++report->lines_skipped;
            return report->lines_read < options.max_lines;
          }
          values[c] = v;
        }
        for (size_t c = 0; c < refs.size(); ++c) moments[c].Add(values[c]);
        return report->lines_read < options.max_lines;
      }));
      PS_RETURN_IF_ERROR(bad);
    }
  }
  config::Schema* out = job->mutable_data()->mutable_schema();
  for (size_t c = 0; c < wanted.size(); ++c) {
    config::DenseColumn* d = out->mutable_dense(wanted[c]);
    const std::string what = absl::StrCat("data.schema.dense[", wanted[c], "] (",
                                          d->has_name() ? d->name() : d->column(), ")");
    const Moments& m = moments[c];
    const double stddev = m.count > 0 ? std::sqrt(m.m2 / static_cast<double>(m.count)) : 0;
    if (m.count == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what,
          ": STANDARDIZE without moments, and no line of the training data has a number "
          "in the column to compute them from"));
    }
    if (!(static_cast<float>(stddev) > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": STANDARDIZE without moments, and the column's ", m.count,
          " values have no spread (stddev 0) to divide by: give mean and stddev in the job"));
    }
    d->set_mean(static_cast<float>(m.mean));
    d->set_stddev(static_cast<float>(stddev));
    report->lines.push_back(absl::StrFormat("%s: STANDARDIZE mean %g stddev %g, from %d lines",
                                            what, d->mean(), d->stddev(), m.count));
  }
  return absl::OkStatus();
}

}  // namespace ps
