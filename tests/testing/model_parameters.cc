#include "tests/testing/model_parameters.h"

#include <algorithm>
#include <cmath>

#include "client/ps_client.h"
#include "common/status_macros.h"
#include "worker/data/criteo_reader.h"
#include "worker/model/cpu_model.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace testing {

absl::StatusOr<std::vector<uint64_t>> KeysOfFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(auto reader, worker::CriteoReader::Open({path}, 0, 1));
  std::vector<uint64_t> keys;
  worker::Batch batch;
  while (true) {
    PS_ASSIGN_OR_RETURN(const int n, reader->Next(1024, &batch));
    if (n == 0) break;
    keys.insert(keys.end(), batch.keys.begin(), batch.keys.begin() + batch.size * 26);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

absl::StatusOr<ModelParameters> PullModelParameters(const std::string& coordinator,
                                                    const std::string& table,
                                                    const std::vector<uint64_t>& keys) {
  ClientOptions options;
  options.coordinator = coordinator;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  PS_ASSIGN_OR_RETURN(const worker::ModelSpec spec, worker::ModelSpec::FromJob(client->job()));
  PS_ASSIGN_OR_RETURN(auto model, worker::CpuModel::Create(spec, 1));
  ModelParameters p;
  p.dense.resize(model->num_params());
  PS_RETURN_IF_ERROR(client->PullDense("dense/model", absl::MakeSpan(p.dense)));
  // The rows of `table`, whose dim the first field's is (the fields of these tests share it).
  p.rows.resize(keys.size() * (spec.field_dims.empty() ? 0 : spec.field_dims[0]));
  PS_RETURN_IF_ERROR(client->Pull(table, keys, absl::MakeSpan(p.rows)));
  return p;
}

double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double scale = std::max({std::fabs(double{a[i]}), std::fabs(double{b[i]}), 1e-3});
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / scale);
  }
  return worst;
}

}  // namespace testing
}  // namespace ps
