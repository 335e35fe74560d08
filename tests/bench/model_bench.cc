// model_bench: forward+backward throughput of every model family on the CPU, and how close it
// comes to the GEMM rate OpenBLAS reaches on the same matrix shapes.
//
// Every family at the quickstart sizes (13 dense features, 26 fields of dim 16), batches 512 and
// 4096:
//   dlrm       bottom 64,16  top 64,32  (concatenation)
//   dlrm_dot   bottom 64,16  top 64,32  (dot interaction: 351 pairs)
//   wide_deep  top 64,32 over [dense, fields] (429 wide) + 26 wide inputs
//   deepfm     top 64,32 over [dense, fields] + FM + 26 first-order inputs
//   dcn_v2     2 full-rank cross layers (429 x 429) + top 64,32
//   dcn_v2_r64 2 cross layers of rank 64 + top 64,32
// each once on pooled inputs ("pooled":false, what the model itself costs) and once with 5 of
// the 26 fields multi-valued of 20 values ("pooled":true): the step then also pools the rows of
// the batch's distinct keys (21 + 5 x 20 values a sample, Zipf(1.1) over 1M ids a field) into the
// model's input and sums the input's gradient back onto them, with the worker's own code
// (worker/embedding_io.h: PoolRows, SpreadGrads), as a worker does around the model.
//
// For each it prints one JSON line:
//   {"bench":"model","family":"dlrm","batch":4096,"pooled":false,"threads":1,
//    "samples_per_s":...,"flops_per_sample":...,"gflops":...,"gemm_gflops":...,
//    "flop_share_of_gemm":...,"gemms":...,"distinct_rows_per_sample":...}
// (distinct_rows_per_sample: the pooled batch's distinct keys over its samples; 0 unpooled)
// flops_per_sample counts 2 m n k for every GEMM of the forward and backward pass (the shapes the
// model actually ran, recorded by CpuModel's GEMM trace) plus the interaction's arithmetic (dot
// products, FM, cross layers' elementwise products); gflops is that over the measured step time.
// gemm_gflops is the rate of the same GEMM shapes run as one chain of plain cblas_sgemm calls
// on contiguous buffers in this run, and flop_share_of_gemm = gflops / gemm_gflops. Times are
// medians of --reps repetitions, the model's and the chain's alternating.
//
//   bazel build -c opt //tests/bench:model_bench
//   bazel-out/k8-opt/bin/tests/bench/model_bench [--threads=1] [--reps=5] [--families=dlrm,...]
//
// --dump=FAMILY measures nothing: it prints one JSON object with the family's initial parameters
// (in LayoutOf's order), a batch of 8 inputs and what one ForwardBackward gives for them (loss,
// probabilities, parameter and input gradients), which tests/bench/torch_models_check.py compares
// with the PyTorch version of the family loaded with the same parameters.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/data/zipf_sampler.h"
#include "worker/embedding_io.h"
#include "worker/model/cpu_model.h"
#include "worker/model/model_spec.h"

ABSL_FLAG(int, threads, 1, "OpenBLAS threads (0: the library's default, one per core)");
ABSL_FLAG(int, reps, 5, "repetitions of each measurement; the median counts");
ABSL_FLAG(std::string, families, "dlrm,dlrm_dot,wide_deep,deepfm,dcn_v2,dcn_v2_r64",
          "comma-separated families to measure");
ABSL_FLAG(std::string, batches, "512,4096", "comma-separated batch sizes");
ABSL_FLAG(std::string, dump, "",
          "a family: print its parameters, a batch and its gradients as JSON instead of timing");

namespace ps {
namespace worker {
namespace {

using internal::GemmShape;
using Clock = std::chrono::steady_clock;

constexpr int kFields = 26;
constexpr int kDim = 16;
constexpr int kMultiFields = 5;  // the last 5 fields
constexpr int kValues = 20;      // values of each multi-valued field

ModelSpec SpecOf(const std::string& family) {
  ModelSpec s;  // 13 dense, 26 x 16, bottom 64,16, top 64,32
  if (family == "dlrm" || family == "dlrm_dot") {
    s.dot_interaction = family == "dlrm_dot";
    return s;
  }
  s.bottom.clear();
  if (family == "wide_deep") {
    s.type = config::Model::WIDE_DEEP;
    s.num_linear = kFields;
  } else if (family == "deepfm") {
    s.type = config::Model::DEEPFM;
    s.num_linear = kFields;
  } else {
    s.type = config::Model::DCN_V2;
    s.cross_layers = 2;
    s.cross_rank = family == "dcn_v2_r64" ? 64 : 0;
  }
  return s;
}

// The arithmetic outside the GEMMs that the family's interaction does per sample, forward and
// backward.
double InteractionFlops(const ModelSpec& s) {
  const double f = s.num_fields(), d = s.field_dims[0];
  const double d0 = s.num_dense + f * d;
  double flops = 2.0 * s.num_linear;  // the linear inputs' sum and gradient
  if (s.type == config::Model::DLRM && s.dot_interaction) flops += 6 * d * (f + 1) * f / 2;
  if (s.type == config::Model::DEEPFM) flops += 6 * f * d;
  if (s.type == config::Model::DCN_V2) flops += 8 * d0 * s.cross_layers;
  return flops;
}

double GemmFlops(const std::vector<GemmShape>& shapes) {
  double flops = 0;
  for (const GemmShape& g : shapes) flops += 2.0 * g.m * g.n * g.k;
  return flops;
}

// The seconds one call of each of `a` and `b` takes, medians over --reps repetitions (each runs
// enough calls for ~0.2 s). The two alternate repetition by repetition, so that other work on the
// machine weighs on both alike.
template <typename A, typename B>
std::pair<double, double> MedianSeconds(A a, B b) {
  auto calls_of = [](auto& step) {
    step();
    step();
    const auto t0 = Clock::now();
    step();
    const double once = std::chrono::duration<double>(Clock::now() - t0).count();
    return std::max(1, static_cast<int>(0.2 / std::max(once, 1e-6)));
  };
  const int calls_a = calls_of(a), calls_b = calls_of(b);
  auto time = [](auto& step, int calls) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) step();
    return std::chrono::duration<double>(Clock::now() - start).count() / calls;
  };
  std::vector<double> ta, tb;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    ta.push_back(time(a, calls_a));
    tb.push_back(time(b, calls_b));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// A batch with 5 multi-valued fields and the worker's pooling around the model
// (worker/embedding_io.h): the batch's keys, 21 single-valued fields and 5 of 20 values, each a
// Zipf(1.1) rank over 1M ids of its own field, deduplicated per table as the worker does before it
// pulls (outside the timed step: it runs with the pull, on the data path), the distinct keys'
// rows, PoolRows into the model's input and SpreadGrads of its gradient back onto the rows.
struct Pooling {
  EmbeddingLayout layout;
  std::vector<TableKeys> tables;
  std::vector<std::vector<float>> rows, grads;
  int64_t distinct = 0;

  Pooling(const ModelSpec& spec, int batch, std::mt19937_64* rng) {
    config::Job job;
    config::Table* emb = job.add_tables();
    emb->set_name("emb");
    emb->set_dim(kDim);
    config::Table* lin = job.add_tables();
    lin->set_name("lin");
    lin->set_dim(1);
    config::Model* m = job.mutable_model();
    m->set_type(spec.type);
    m->set_shared_table("emb");
    m->set_num_sparse_features(kFields);
    if (spec.num_linear > 0) m->set_linear_table("lin");
    if (spec.type == config::Model::WIDE_DEEP) {
      for (int f = 0; f < kFields; ++f) m->add_wide()->add_fields(absl::StrCat("C", f + 1));
    }
    absl::StatusOr<EmbeddingLayout> made = EmbeddingLayout::FromJob(job, spec);
    if (!made.ok() || made->width() != spec.emb_width()) {
      std::fprintf(stderr, "model_bench: the pooling layout: %s\n",
                   made.status().ToString().c_str());
      std::exit(1);
    }
    layout = *std::move(made);
    const ZipfSampler zipf = ZipfSampler::Create(1000000, 1.1).value();
    Batch b;
    b.size = batch;
    b.offsets.push_back(0);
    for (int r = 0; r < batch; ++r) {
      for (int f = 0; f < kFields; ++f) {
        const int values = f < kFields - kMultiFields ? 1 : kValues;
        for (int v = 0; v < values; ++v) {
          b.keys.push_back(uint64_t(f + 1) << 40 | zipf.Draw([&] { return (*rng)(); }));
        }
        b.offsets.push_back(static_cast<uint32_t>(b.keys.size()));
      }
    }
    KeyDeduper dedup;
    GatherKeys(layout, b, &dedup, &tables);
    std::normal_distribution<float> n(0.0f, 0.1f);
    rows.resize(tables.size());
    for (size_t g = 0; g < tables.size(); ++g) {
      distinct += static_cast<int64_t>(tables[g].unique.size());
      rows[g].resize(tables[g].unique.size() * layout.tables()[g].dim);
      for (float& v : rows[g]) v = n(*rng);
    }
  }
  void Pool(int batch, float* emb) const { PoolRows(layout, batch, tables, rows, emb); }
  void Unpool(int batch, const float* emb_grad) {
    SpreadGrads(layout, batch, tables, emb_grad, &grads);
  }
};

int Run(const std::string& family, int batch, bool pooled) {
  const ModelSpec spec = SpecOf(family);
  auto created = CpuModel::Create(spec, 1);
  if (!created.ok()) {
    std::fprintf(stderr, "%s: %s\n", family.c_str(), created.status().ToString().c_str());
    return 1;
  }
  CpuModel& model = **created;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int width = spec.emb_width();
  std::vector<float> dense(size_t(batch) * spec.num_dense), emb(size_t(batch) * width);
  std::vector<float> labels(batch), dense_grad(model.num_params()), emb_grad(emb.size());
  std::vector<float> probs(batch);
  for (float& v : dense) v = std::fabs(normal(rng));
  for (float& v : emb) v = 0.1f * normal(rng);
  for (float& v : labels) v = static_cast<float>(rng() % 2);
  std::unique_ptr<Pooling> pooling;
  if (pooled) pooling = std::make_unique<Pooling>(spec, batch, &rng);

  auto step = [&] {
    if (pooled) pooling->Pool(batch, emb.data());
    model.ForwardBackward(batch, dense.data(), emb.data(), labels.data(), 1.0f, dense_grad.data(),
                          emb_grad.data(), probs.data());
    if (pooled) pooling->Unpool(batch, emb_grad.data());
  };
  std::vector<GemmShape> shapes;
  model.set_gemm_trace(&shapes);
  step();
  model.set_gemm_trace(nullptr);

  // The same GEMMs as one chain of plain sgemm calls on contiguous buffers.
  size_t a_max = 0, b_max = 0, c_max = 0;
  for (const GemmShape& g : shapes) {
    a_max = std::max(a_max, size_t(g.m) * g.k);
    b_max = std::max(b_max, size_t(g.k) * g.n);
    c_max = std::max(c_max, size_t(g.m) * g.n);
  }
  std::vector<float> a(a_max), b(b_max), c(c_max);
  for (float& v : a) v = 0.1f * normal(rng);
  for (float& v : b) v = 0.1f * normal(rng);
  auto chain = [&] {
    for (const GemmShape& g : shapes) {
      cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                  g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, a.data(),
                  g.trans_a ? g.m : g.k, b.data(), g.trans_b ? g.k : g.n, 0.0f, c.data(), g.n);
    }
  };
  const auto [seconds, gemm_seconds] = MedianSeconds(step, chain);
  const double gemm_flops = GemmFlops(shapes);
  const double flops = gemm_flops + InteractionFlops(spec) * batch;
  const double gflops = flops / seconds * 1e-9;
  const double gemm_gflops = gemm_flops / gemm_seconds * 1e-9;
  std::printf(
      "{\"bench\":\"model\",\"family\":\"%s\",\"batch\":%d,\"pooled\":%s,\"threads\":%d,"
      "\"samples_per_s\":%.0f,\"flops_per_sample\":%.0f,\"gflops\":%.2f,\"gemm_gflops\":%.2f,"
      "\"flop_share_of_gemm\":%.3f,\"gemms\":%zu,\"distinct_rows_per_sample\":%.2f}\n",
      family.c_str(), batch, pooled ? "true" : "false", absl::GetFlag(FLAGS_threads),
      batch / seconds, flops / batch, gflops, gemm_gflops, gflops / gemm_gflops, shapes.size(),
      pooled ? static_cast<double>(pooling->distinct) / batch : 0.0);
  std::fflush(stdout);
  return 0;
}

void PrintArray(const char* name, const std::vector<float>& values) {
  std::printf("\"%s\":[", name);
  for (size_t i = 0; i < values.size(); ++i) std::printf("%s%.9g", i > 0 ? "," : "", values[i]);
  std::printf("],");
}

// One ForwardBackward of `family` on a batch of 8, with everything it read and wrote, as JSON.
int Dump(const std::string& family) {
  const ModelSpec spec = SpecOf(family);
  auto created = CpuModel::Create(spec, 3);
  if (!created.ok()) {
    std::fprintf(stderr, "%s: %s\n", family.c_str(), created.status().ToString().c_str());
    return 1;
  }
  CpuModel& model = **created;
  constexpr int kBatch = 8;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> dense(size_t(kBatch) * spec.num_dense), emb(size_t(kBatch) * spec.emb_width());
  std::vector<float> labels(kBatch), probs(kBatch), emb_grad(emb.size());
  std::vector<float> dense_grad(model.num_params());
  for (float& v : dense) v = std::fabs(normal(rng));
  for (float& v : emb) v = 0.3f * normal(rng);
  for (int r = 0; r < kBatch; ++r) labels[r] = static_cast<float>(rng() % 2);
  const std::vector<float> params(model.params().begin(), model.params().end());
  const float loss = model.ForwardBackward(kBatch, dense.data(), emb.data(), labels.data(), 1.0f,
                                           dense_grad.data(), emb_grad.data(), probs.data());
  std::printf("{\"family\":\"%s\",", family.c_str());
  PrintArray("params", params);
  PrintArray("dense", dense);
  PrintArray("emb", emb);
  PrintArray("labels", labels);
  PrintArray("probs", probs);
  PrintArray("dense_grad", dense_grad);
  PrintArray("emb_grad", emb_grad);
  std::printf("\"loss\":%.9g}\n", loss);
  return 0;
}

int Main() {
  if (!absl::GetFlag(FLAGS_dump).empty()) return Dump(absl::GetFlag(FLAGS_dump));
  SetCpuThreads(absl::GetFlag(FLAGS_threads));
  int failed = 0;
  const std::vector<std::string> families =
      absl::StrSplit(absl::GetFlag(FLAGS_families), ',', absl::SkipEmpty());
  const std::vector<std::string> batches =
      absl::StrSplit(absl::GetFlag(FLAGS_batches), ',', absl::SkipEmpty());
  for (const std::string& family : families) {
    for (const std::string& b : batches) {
      for (bool pooled : {false, true}) failed |= Run(family, std::stoi(b), pooled);
    }
  }
  return failed;
}

}  // namespace
}  // namespace worker
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::worker::Main();
}
