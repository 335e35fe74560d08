#include "worker/embedding_io.h"

#include <algorithm>
#include <cstring>

namespace ps {
namespace worker {
namespace {

bool Direct(const std::vector<FieldGroup>& groups, int num_sparse) {
  return groups.size() == 1 && static_cast<int>(groups[0].fields.size()) == num_sparse;
}

}  // namespace

std::vector<FieldGroup> GroupFields(const config::Job& job, int num_sparse) {
  std::vector<FieldGroup> groups;
  for (int f = 0; f < num_sparse; ++f) {
    const std::string table =
        job.model().has_shared_table() ? job.model().shared_table() : job.tables(f).name();
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const FieldGroup& g) { return g.table == table; });
    if (it == groups.end()) {
      groups.push_back(FieldGroup{table, {}});
      it = groups.end() - 1;
    }
    it->fields.push_back(f);
  }
  return groups;
}

void StartPull(Client* client, const std::vector<FieldGroup>& groups, int num_sparse, int dim,
               StepData* d) {
  const int n = d->batch.size;
  d->emb.resize(size_t(n) * num_sparse * dim);
  d->pending.clear();
  if (Direct(groups, num_sparse)) {
    d->pending.push_back(client->PullAsync(
        groups[0].table, absl::MakeConstSpan(d->batch.keys.data(), size_t(n) * num_sparse),
        absl::MakeSpan(d->emb)));
    return;
  }
  d->keys.resize(groups.size());
  d->rows.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t nf = groups[g].fields.size();
    d->keys[g].resize(size_t(n) * nf);
    for (int r = 0; r < n; ++r) {
      for (size_t j = 0; j < nf; ++j) {
        d->keys[g][r * nf + j] = d->batch.keys[size_t(r) * num_sparse + groups[g].fields[j]];
      }
    }
    d->rows[g].resize(d->keys[g].size() * dim);
    d->pending.push_back(
        client->PullAsync(groups[g].table, d->keys[g], absl::MakeSpan(d->rows[g])));
  }
}

absl::Status FinishPull(const std::vector<FieldGroup>& groups, int num_sparse, int dim,
                        StepData* d) {
  absl::Status status;
  for (auto& f : d->pending) status.Update(f.get());
  d->pending.clear();
  if (!status.ok() || Direct(groups, num_sparse)) return status;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t nf = groups[g].fields.size();
    for (int r = 0; r < d->batch.size; ++r) {
      for (size_t j = 0; j < nf; ++j) {
        std::memcpy(d->emb.data() + (size_t(r) * num_sparse + groups[g].fields[j]) * dim,
                    d->rows[g].data() + (r * nf + j) * dim, dim * sizeof(float));
      }
    }
  }
  return absl::OkStatus();
}

void StartPush(Client* client, const std::vector<FieldGroup>& groups, int num_sparse, int dim,
               const Batch& batch, const std::vector<float>& emb_grad, int64_t step, PushData* p) {
  p->step = step;
  p->pending.clear();
  p->keys.resize(groups.size());
  p->grads.resize(groups.size());
  const int n = batch.size;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t nf = groups[g].fields.size();
    p->keys[g].resize(size_t(n) * nf);
    p->grads[g].resize(p->keys[g].size() * dim);
    for (int r = 0; r < n; ++r) {
      for (size_t j = 0; j < nf; ++j) {
        const size_t src = size_t(r) * num_sparse + groups[g].fields[j];
        p->keys[g][r * nf + j] = batch.keys[src];
        std::memcpy(p->grads[g].data() + (r * nf + j) * dim, emb_grad.data() + src * dim,
                    dim * sizeof(float));
      }
    }
    p->pending.push_back(client->PushAsync(groups[g].table, p->keys[g], p->grads[g]));
  }
}

void DrainPull(StepData* d) {
  for (auto& f : d->pending) f.wait();
  d->pending.clear();
}

absl::Status FinishPush(PushData* p) {
  absl::Status status;
  for (auto& f : p->pending) status.Update(f.get());
  p->pending.clear();
  return status;
}

}  // namespace worker
}  // namespace ps
