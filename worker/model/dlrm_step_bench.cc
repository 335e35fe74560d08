// Forward+backward steps of the model at batch 4096 with the quickstart shape (13 dense, 26
// fields, dim 16, bottom [64, 16], top [64, 32]), on the CPU and, when there is one, the GPU
// (host buffers in and out, as the trainer calls it). Prints one JSON line per backend:
//   {"bench":"dlrm_step","backend":"cpu","batch":4096,"samples_per_s":...}
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "worker/model/cpu_model.h"
#include "worker/model/gpu_model.h"

namespace ps {
namespace worker {
namespace {

constexpr int kBatch = 4096;
constexpr int kWarmup = 3;
constexpr double kMinSeconds = 2.0;

struct Inputs {
  std::vector<float> dense, emb, labels;
};

// Runs `step` (returns the loss) until kMinSeconds have passed and prints the rate.
template <typename Step>
void Measure(const char* backend, Step step) {
  for (int i = 0; i < kWarmup; ++i) step();
  const auto start = std::chrono::steady_clock::now();
  int steps = 0;
  double seconds = 0;
  float loss = 0;
  do {
    loss += step();
    ++steps;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (seconds < kMinSeconds);
  if (!std::isfinite(loss)) std::fprintf(stderr, "warning: %s loss is not finite\n", backend);
  std::printf("{\"bench\":\"dlrm_step\",\"backend\":\"%s\",\"batch\":%d,\"samples_per_s\":%.0f}\n",
              backend, kBatch, steps * double(kBatch) / seconds);
  std::fflush(stdout);
}

int Main() {
  const ModelSpec shape;  // the defaults are the quickstart shape
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  for (int i = 0; i < kBatch * shape.num_dense; ++i) in.dense.push_back(std::fabs(normal(rng)));
  for (int i = 0; i < kBatch * shape.emb_width(); ++i) {
    in.emb.push_back(0.1f * normal(rng));
  }
  for (int i = 0; i < kBatch; ++i) in.labels.push_back(static_cast<float>(rng() % 2));
  std::vector<float> emb_grad(in.emb.size()), probs(kBatch);

  auto cpu = CpuModel::Create(shape, 1);
  if (!cpu.ok()) {
    std::fprintf(stderr, "%s\n", cpu.status().ToString().c_str());
    return 1;
  }
  std::vector<float> dense_grad((*cpu)->num_params());
  Measure("cpu", [&] {
    return (*cpu)->ForwardBackward(kBatch, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f,
                                   dense_grad.data(), emb_grad.data(), probs.data());
  });

  if (!GpuModel::Available()) {
    std::fprintf(stderr, "no CUDA device: gpu backend skipped\n");
    return 0;
  }
  auto gpu = GpuModel::Create(shape, 1);
  if (!gpu.ok()) {
    std::fprintf(stderr, "%s\n", gpu.status().ToString().c_str());
    return 1;
  }
  Measure("gpu", [&] {
    return (*gpu)->ForwardBackward(kBatch, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f,
                                   dense_grad.data(), emb_grad.data(), probs.data());
  });
  return 0;
}

}  // namespace
}  // namespace worker
}  // namespace ps

int main() { return ps::worker::Main(); }
