// The tiny model the worker's tests train and evaluate: a DLRM over one shared table "emb" of dim
// 4, a bottom MLP of 8 and 4, a top MLP of 8, 2 dense and 3 sparse features. Fast enough that a
// test trains it for many steps in process.
#ifndef PS_WORKER_TESTING_TINY_MODEL_H_
#define PS_WORKER_TESTING_TINY_MODEL_H_

#include "proto/job.pb.h"

namespace ps {
namespace worker {

// Adds the table "emb" (dim 4, the job's default initializer and optimizer) and the model above
// to `job`, and returns the table so that the test can set its initializer and optimizer.
inline config::Table* AddTinyModel(config::Job* job) {
  config::Table* table = job->add_tables();
  table->set_name("emb");
  table->set_dim(4);
  config::Model* model = job->mutable_model();
  model->add_bottom_mlp(8);
  model->add_bottom_mlp(4);
  model->add_top_mlp(8);
  model->set_num_dense_features(2);
  model->set_num_sparse_features(3);
  model->set_shared_table("emb");
  return table;
}

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_TESTING_TINY_MODEL_H_
