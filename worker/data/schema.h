// The job's data schema compiled for the readers: the CRITEO preset (model.num_dense_features
// and num_sparse_features) or data.schema's delimited text, with its columns, transforms and
// multi-valued fields (proto/job.proto, message Schema).
#ifndef PS_WORKER_DATA_SCHEMA_H_
#define PS_WORKER_DATA_SCHEMA_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"

namespace ps {
namespace worker {

// The schema the job's data is read with. INVALID_ARGUMENT for what common/job_config.cc's
// validation refuses (a column that is neither a number from 1 nor, with a header, a name; a
// separator that is not one character or is the delimiter; STANDARDIZE without a positive
// stddev; DELIMITED without a schema), for jobs that were built in code.
absl::StatusOr<SchemaOptions> SchemaOf(const config::Job& job);

// The names of the job's sparse fields, in order: the schema's (a field's name, else its column)
// or, for the CRITEO preset, "C1", "C2", ...
std::vector<std::string> FieldNames(const config::Job& job);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_SCHEMA_H_
