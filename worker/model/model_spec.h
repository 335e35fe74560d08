// What a model family computes on: its family and knobs (job.model), the dense features, and the
// pooled embeddings a sample brings in. Every backend and family takes the same inputs:
//
//   dense: batch x num_dense floats (the transformed dense features);
//   emb:   batch x emb_width() floats, per sample the pooled embedding of every sparse field in
//          order (field f has field_dims[f] floats), then num_linear single floats (the pooled
//          dim-1 weights of WIDE_DEEP's wide features or DEEPFM's first-order terms).
//
// and gives back the gradient of the loss in the same layout (emb_grad), which the worker
// spreads over the rows it pooled.
#ifndef PS_WORKER_MODEL_MODEL_SPEC_H_
#define PS_WORKER_MODEL_MODEL_SPEC_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace ps {
namespace worker {

struct ModelSpec {
  config::Model::Type type = config::Model::DLRM;
  // Dense features per sample (>= 0; DLRM needs >= 1).
  int num_dense = 13;
  // The dim of each sparse field's pooled embedding, in the fields' order (each >= 1).
  std::vector<int> field_dims = std::vector<int>(26, 16);
  // Dim-1 inputs after the fields: WIDE_DEEP's wide features; DEEPFM's first-order weight of
  // each field (then == field_dims.size()); 0 for the other families.
  int num_linear = 0;
  // DLRM: output sizes of the bottom MLP's layers (with dot_interaction the last is the fields'
  // dim).
  std::vector<int> bottom = {64, 16};
  // Output sizes of the hidden layers of the MLP that ends in the logit; a final layer of size 1
  // is added.
  std::vector<int> top = {64, 32};
  // DLRM: the top MLP reads [bottom output, pairwise dot products of the bottom output and the
  // field embeddings] (all of one dim).
  bool dot_interaction = false;
  // DCN_V2: cross layers (>= 1) and the rank of each one's W (0: full).
  int cross_layers = 2;
  int cross_rank = 0;

  int num_fields() const { return static_cast<int>(field_dims.size()); }
  // Floats of `emb` per sample: the sum of field_dims plus num_linear.
  int emb_width() const;

  // The job's model, with the fields' dims from their tables (data.schema's sparse fields, else
  // model.num_sparse_features fields reading model.shared_table or the job's tables in order).
  // INVALID_ARGUMENT, naming the setting, when the family cannot take the shapes: DLRM's
  // dot_interaction or DEEPFM with fields of different dims, a bottom MLP that does not end in
  // that dim, a linear_table missing or not of dim 1 for WIDE_DEEP and DEEPFM, a wide feature
  // naming no field or a field data.schema's sparse fields lack (so WIDE_DEEP needs a schema), a
  // knob of another family set (bottom_mlp outside DLRM, cross_* outside DCN_V2, wide outside
  // WIDE_DEEP).
  static absl::StatusOr<ModelSpec> FromJob(const config::Job& job);
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_MODEL_SPEC_H_
