// The kernels against host references, on a GPU (cuda_kernels:gpu_test_main fails the test on a
// machine without one).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/dense.h"
#include "cuda_kernels/device.h"
#include "cuda_kernels/embedding.h"
#include "cuda_kernels/interaction.h"
#include "cuda_kernels/memory.h"
#include "cuda_kernels/testing/require_ok.h"

namespace ps {
namespace cuda {
namespace {

template <typename T>
DeviceArray<T> Upload(const std::vector<T>& host) {
  DeviceArray<T> d;
  REQUIRE_OK(d.Resize(host.size()));
  REQUIRE_OK(Copy(d.data(), host.data(), d.bytes(), nullptr));
  return d;
}

template <typename T>
std::vector<T> Download(const DeviceArray<T>& d) {
  std::vector<T> host(d.size());
  REQUIRE_OK(StreamSynchronize(nullptr));
  REQUIRE_OK(Copy(host.data(), d.data(), d.bytes(), nullptr));
  REQUIRE_OK(StreamSynchronize(nullptr));
  return host;
}

std::vector<float> RandomFloats(size_t n, std::mt19937_64* rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

// A table's bags over num_rows rows: batch x slots bags of 0 to max_values values each (about a
// quarter empty), rows repeating; slot j pools by MEAN when mean_slots.
struct HostBags {
  std::vector<uint32_t> index, ends;
  std::vector<int32_t> offset;
  std::vector<uint8_t> mean;
};

HostBags RandomBags(int batch, int slots, int dim, int max_values, int num_rows, bool mean_slots,
                    std::mt19937_64* rng) {
  HostBags h;
  for (int j = 0; j < slots; ++j) {
    h.offset.push_back(j * dim + 2 * j);  // gaps between the slots' floats
    h.mean.push_back(mean_slots && j % 2 == 0);
  }
  for (int64_t bag = 0; bag < int64_t(batch) * slots; ++bag) {
    const int values = (*rng)() % 4 == 0 ? 0 : 1 + static_cast<int>((*rng)() % max_values);
    for (int k = 0; k < values; ++k) h.index.push_back(static_cast<uint32_t>((*rng)() % num_rows));
    h.ends.push_back(static_cast<uint32_t>(h.index.size()));
  }
  return h;
}

void CheckClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                double abs) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(rel).margin(abs));
  }
}

TEST_CASE("GatherPooled pools the values of every bag at its slot's offset", "[cuda][embedding]") {
  const bool mean = GENERATE(false, true);
  const int dim = GENERATE(1, 16, 33);
  const int batch = 37, slots = 3, num_rows = 50;
  std::mt19937_64 rng(dim);
  const HostBags h = RandomBags(batch, slots, dim, 4, num_rows, mean, &rng);
  const int64_t stride = h.offset.back() + dim + 5;  // pooled rows inside wider rows
  const std::vector<float> rows = RandomFloats(size_t(num_rows) * dim, &rng);
  std::vector<float> want(batch * stride, 42.0f);
  uint32_t begin = 0;
  for (int s = 0; s < batch; ++s) {
    for (int j = 0; j < slots; ++j) {
      const uint32_t end = h.ends[s * slots + j];
      for (int d = 0; d < dim; ++d) {
        float sum = 0.0f;
        for (uint32_t k = begin; k < end; ++k) sum += rows[size_t(h.index[k]) * dim + d];
        if (h.mean[j] && end - begin > 1) sum *= 1.0f / static_cast<float>(end - begin);
        want[s * stride + h.offset[j] + d] = sum;
      }
      begin = end;
    }
  }
  DeviceArray<float> d_rows = Upload(rows);
  DeviceArray<uint32_t> d_index = Upload(h.index);
  DeviceArray<uint32_t> d_ends = Upload(h.ends);
  DeviceArray<int32_t> d_offset = Upload(h.offset);
  DeviceArray<uint8_t> d_mean = Upload(h.mean);
  DeviceArray<float> d_out = Upload(std::vector<float>(batch * stride, 42.0f));
  Bags bags;
  bags.index = d_index.data();
  bags.ends = d_ends.data();
  bags.batch = batch;
  bags.slots = slots;
  bags.slot_offset = d_offset.data();
  bags.slot_mean = d_mean.data();
  REQUIRE_OK(GatherPooled(d_rows.data(), num_rows, dim, bags, d_out.data(), stride, nullptr));
  // The same additions in the same order, the same scaling: the same floats.
  CHECK(Download(d_out) == want);
}

TEST_CASE("ScatterRows sums the gradients of every row's bags, the same on every run",
          "[cuda][embedding]") {
  const bool mean = GENERATE(false, true);
  const int dim = GENERATE(1, 16, 33);
  const int batch = 300, slots = 4, num_rows = 40;  // hot rows: ~60 values each
  std::mt19937_64 rng(dim + 100);
  const HostBags h = RandomBags(batch, slots, dim, 3, num_rows, mean, &rng);
  const int64_t stride = h.offset.back() + dim + dim;  // bag gradients inside wider rows
  const std::vector<float> bag_grad = RandomFloats(batch * stride, &rng, 0.01f);
  RowCsr csr;
  REQUIRE_OK(
      BuildRowCsr(h.index.data(), h.ends.data(), batch, slots, h.mean.data(), num_rows, &csr));
  // The host's spreading (worker/embedding_io's SpreadGrads): every value adds its bag's
  // gradient, scaled, to its row, in the values' order.
  std::vector<float> want(size_t(num_rows) * dim, 0.0f);
  uint32_t begin = 0;
  for (int64_t bag = 0; bag < int64_t(batch) * slots; ++bag) {
    const uint32_t end = h.ends[bag];
    const int j = static_cast<int>(bag % slots);
    const float scale =
        h.mean[j] && end - begin > 1 ? 1.0f / static_cast<float>(end - begin) : 1.0f;
    for (uint32_t k = begin; k < end; ++k) {
      for (int d = 0; d < dim; ++d) {
        want[size_t(h.index[k]) * dim + d] +=
            bag_grad[(bag / slots) * stride + h.offset[j] + d] * scale;
      }
    }
    begin = end;
  }
  DeviceArray<float> d_grad = Upload(bag_grad);
  DeviceArray<int32_t> d_offset = Upload(h.offset);
  DeviceArray<int32_t> d_offsets = Upload(csr.offsets);
  DeviceArray<int32_t> d_bags = Upload(csr.bags);
  DeviceArray<float> d_weight = Upload(csr.bag_weight);
  DeviceArray<float> d_out;
  REQUIRE_OK(d_out.Resize(want.size()));
  Bags bags;
  bags.batch = batch;
  bags.slots = slots;
  bags.slot_offset = d_offset.data();
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 3; ++run) {
    REQUIRE_OK(Zero(d_out.data(), d_out.bytes(), nullptr));
    REQUIRE_OK(ScatterRows(d_grad.data(), stride, dim, bags, d_offsets.data(), d_bags.data(),
                           d_weight.data(), num_rows, d_out.data(), nullptr));
    runs.push_back(Download(d_out));
  }
  // Same order of additions as the host; fused multiply-adds round differently.
  CheckClose(runs[0], want, 1e-5, 1e-6);
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

TEST_CASE("BiasRelu and its backward", "[cuda][dense]") {
  const bool relu = GENERATE(true, false);
  const int rows = GENERATE(1, 100, 4096);
  const int cols = GENERATE(1, 16, 70);
  std::mt19937_64 rng(rows * 131 + cols);
  const std::vector<float> pre = RandomFloats(size_t(rows) * cols, &rng);
  const std::vector<float> bias = RandomFloats(cols, &rng);
  const std::vector<float> grad = RandomFloats(size_t(rows) * cols, &rng, 1e-3f);
  std::vector<float> y(pre.size()), masked(grad.size()), db(cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      const float v = pre[i] + bias[c];
      y[i] = relu ? std::max(v, 0.0f) : v;
      masked[i] = relu && y[i] <= 0.0f ? 0.0f : grad[i];
    }
  }
  std::vector<double> db_exact(cols, 0.0);
  for (size_t i = 0; i < masked.size(); ++i) db_exact[i % cols] += masked[i];
  for (int c = 0; c < cols; ++c) db[c] = static_cast<float>(db_exact[c]);

  DeviceArray<float> d_y = Upload(pre);
  DeviceArray<float> d_bias = Upload(bias);
  REQUIRE_OK(BiasRelu(d_y.data(), d_bias.data(), rows, cols, relu, nullptr));
  CHECK(Download(d_y) == y);  // one addition and a max: exact

  DeviceArray<float> d_grad = Upload(grad);
  DeviceArray<float> d_db;
  REQUIRE_OK(d_db.Resize(cols));
  REQUIRE_OK(BiasReluBackward(d_grad.data(), d_y.data(), rows, cols, relu, d_db.data(), nullptr));
  CHECK(Download(d_grad) == masked);
  // A float sum of up to 4096 terms against a double one: ~sqrt(rows) ulps of the terms.
  CheckClose(Download(d_db), db, 1e-4, 1e-6);
}

TEST_CASE("SigmoidBce matches the stable host formulas", "[cuda][dense]") {
  const int n = GENERATE(0, 1, 1000, 5000);
  std::mt19937_64 rng(n);
  std::vector<float> logits = RandomFloats(n, &rng, 4.0f);
  if (n > 2) {
    logits[0] = 80.0f;  // saturated in both directions: no inf, no nan
    logits[1] = -80.0f;
  }
  std::vector<float> labels(n);
  for (float& y : labels) y = static_cast<float>(rng() % 2);
  const float scale = 0.5f;
  std::vector<float> probs(n), grad(n);
  double loss = 0;
  for (int r = 0; r < n; ++r) {
    const float z = logits[r];
    probs[r] = z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
    loss += std::max(z, 0.0f) + std::log1p(std::exp(-std::fabs(z))) - labels[r] * z;
    grad[r] = (probs[r] - labels[r]) * scale / n;
  }
  DeviceArray<float> d_logits = Upload(logits);
  DeviceArray<float> d_labels = Upload(labels);
  DeviceArray<float> d_probs, d_grad;
  DeviceArray<double> d_loss;
  REQUIRE_OK(d_probs.Resize(n));
  REQUIRE_OK(d_grad.Resize(n));
  REQUIRE_OK(d_loss.Resize(1));
  REQUIRE_OK(SigmoidBce(d_logits.data(), d_labels.data(), n, scale, d_probs.data(), d_grad.data(),
                        d_loss.data(), nullptr));
  // expf/log1pf on the device are within 2 ulps of the host's.
  CheckClose(Download(d_probs), probs, 1e-6, 1e-7);
  // Near p == y the difference cancels: allow the probability's rounding, scaled like grad.
  CheckClose(Download(d_grad), grad, 1e-5, 1e-6 * scale / std::max(n, 1));
  CHECK(Download(d_loss)[0] == Approx(loss).epsilon(1e-6).margin(1e-9));
  for (float p : Download(d_probs)) REQUIRE(std::isfinite(p));

  DeviceArray<float> d_p2;
  REQUIRE_OK(d_p2.Resize(n));
  REQUIRE_OK(Sigmoid(d_logits.data(), n, d_p2.data(), nullptr));
  CHECK(Download(d_p2) == Download(d_probs));
}

TEST_CASE("Blas::Gemm multiplies row-major matrices", "[cuda][blas]") {
  const bool ta = GENERATE(false, true);
  const bool tb = GENERATE(false, true);
  const int m = 37, n = 19, k = 53, pad = 3;
  const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  std::mt19937_64 rng(ta * 2 + tb);
  const std::vector<float> a = RandomFloats(size_t(ta ? k : m) * lda, &rng);
  const std::vector<float> b = RandomFloats(size_t(tb ? n : k) * ldb, &rng);
  const std::vector<float> c0 = RandomFloats(size_t(m) * ldc, &rng);
  const float alpha = 0.75f, beta = 0.5f;
  std::vector<float> want = c0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[size_t(p) * lda + i] : a[size_t(i) * lda + p];
        const float bv = tb ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j];
        acc += double(av) * bv;
      }
      want[size_t(i) * ldc + j] = static_cast<float>(alpha * acc + beta * c0[size_t(i) * ldc + j]);
    }
  }
  void* stream = nullptr;
  REQUIRE_OK(StreamCreate(&stream));
  std::unique_ptr<Blas> blas;
  REQUIRE_OK(Blas::Create(stream, &blas));
  DeviceArray<float> d_a = Upload(a), d_b = Upload(b), d_c = Upload(c0);
  REQUIRE_OK(
      blas->Gemm(ta, tb, m, n, k, alpha, d_a.data(), lda, d_b.data(), ldb, beta, d_c.data(), ldc));
  REQUIRE_OK(StreamSynchronize(stream));
  // Products of N(0,1) values summed over k = 53: float against double, no TF32.
  CheckClose(Download(d_c), want, 1e-4, 1e-4);
  CHECK(blas->Gemm(ta, tb, m, n, k, alpha, d_a.data(), 1, d_b.data(), ldb, beta, d_c.data(), ldc)
            .kind == Error::kInvalidArgument);
  blas.reset();
  REQUIRE_OK(StreamDestroy(stream));
}

TEST_CASE("DotInteraction and its backward, inside wider rows", "[cuda][interaction]") {
  const int fields = GENERATE(1, 5, 26);
  const int dim = GENERATE(1, 16, 33);
  const int batch = GENERATE(1, 7, 300);
  INFO("fields " << fields << ", dim " << dim << ", batch " << batch);
  const int n = fields + 1, pairs = n * fields / 2;
  // z and the dots inside the top MLP's input rows ([z, dots], width dim + pairs), as GpuModel.
  const int64_t top = dim + pairs, emb_ld = int64_t(fields) * dim + 2;
  std::mt19937_64 rng(fields * 1000 + dim * 10 + batch);
  const std::vector<float> zin = RandomFloats(size_t(batch) * dim, &rng);
  const std::vector<float> emb = RandomFloats(size_t(batch) * emb_ld, &rng);
  auto vec = [&](int r, int i) {
    return i == 0 ? &zin[size_t(r) * dim] : &emb[size_t(r) * emb_ld + size_t(i - 1) * dim];
  };
  std::vector<float> want(size_t(batch) * top, 3.0f);
  for (int r = 0; r < batch; ++r) {
    int p = 0;
    for (int i = 1; i < n; ++i) {
      for (int j = 0; j < i; ++j, ++p) {
        double s = 0;
        for (int k = 0; k < dim; ++k) s += double(vec(r, i)[k]) * vec(r, j)[k];
        want[size_t(r) * top + dim + p] = static_cast<float>(s);
      }
    }
  }
  DeviceArray<float> d_z = Upload(zin), d_emb = Upload(emb);
  DeviceArray<float> d_top = Upload(std::vector<float>(size_t(batch) * top, 3.0f));
  REQUIRE_OK(DotInteraction(d_z.data(), dim, d_emb.data(), emb_ld, batch, fields, dim,
                            d_top.data() + dim, top, nullptr));
  CheckClose(Download(d_top), want, 1e-5, 1e-4);  // float sums against double ones

  // Backward from a gradient of [z, dots]: z's part gains dv_0, the fields get dv_1..dv_F.
  const std::vector<float> g = RandomFloats(size_t(batch) * top, &rng);
  std::vector<float> want_g = g;
  std::vector<float> want_eg(size_t(batch) * emb_ld, 9.0f);
  for (int r = 0; r < batch; ++r) {
    const float* gr = &g[size_t(r) * top + dim];
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < dim; ++k) {
        double acc = 0;
        for (int j = 0; j < n; ++j) {
          if (j == i) continue;
          const float gij = i > j ? gr[i * (i - 1) / 2 + j] : gr[j * (j - 1) / 2 + i];
          acc += double(gij) * vec(r, j)[k];
        }
        if (i == 0) {
          want_g[size_t(r) * top + k] += static_cast<float>(acc);
        } else {
          want_eg[size_t(r) * emb_ld + size_t(i - 1) * dim + k] = static_cast<float>(acc);
        }
      }
    }
  }
  DeviceArray<float> d_g = Upload(g);
  DeviceArray<float> d_eg = Upload(std::vector<float>(size_t(batch) * emb_ld, 9.0f));
  REQUIRE_OK(DotInteractionBackward(d_g.data() + dim, top, d_z.data(), dim, d_emb.data(), emb_ld,
                                    batch, fields, dim, d_g.data(), top, d_eg.data(), emb_ld,
                                    nullptr));
  CheckClose(Download(d_g), want_g, 1e-4, 1e-4);
  CheckClose(Download(d_eg), want_eg, 1e-4, 1e-4);
}

TEST_CASE("the linear sum, the FM term and their backward", "[cuda][interaction]") {
  const int fields = GENERATE(1, 26);
  const int dim = GENERATE(1, 16);
  const int num_linear = GENERATE(1, 26);
  const int batch = GENERATE(1, 7, 300);
  const int fw = fields * dim;
  const int64_t ld = fw + num_linear;  // model_spec.h's emb rows: fields, then linear inputs
  std::mt19937_64 rng(fields * 1000 + dim * 100 + num_linear * 10 + batch);
  const std::vector<float> emb = RandomFloats(size_t(batch) * ld, &rng, 0.3f);
  const std::vector<float> logits = RandomFloats(batch, &rng);
  const std::vector<float> dlogit = RandomFloats(batch, &rng);
  const std::vector<float> eg = RandomFloats(size_t(batch) * ld, &rng);
  std::vector<float> want = logits, want_eg = eg;
  for (int r = 0; r < batch; ++r) {
    const float* er = &emb[size_t(r) * ld];
    double lin = 0, squares = 0, total = 0;
    for (int j = 0; j < num_linear; ++j) lin += er[fw + j];
    std::vector<double> sum(dim, 0.0);
    for (int f = 0; f < fields; ++f) {
      for (int k = 0; k < dim; ++k) {
        sum[k] += er[f * dim + k];
        squares += double(er[f * dim + k]) * er[f * dim + k];
      }
    }
    for (int k = 0; k < dim; ++k) total += sum[k] * sum[k];
    want[r] = static_cast<float>(logits[r] + lin + 0.5 * (total - squares));
    for (int f = 0; f < fields; ++f) {
      for (int k = 0; k < dim; ++k) {
        want_eg[size_t(r) * ld + f * dim + k] +=
            static_cast<float>(dlogit[r] * (sum[k] - er[f * dim + k]));
      }
    }
    for (int j = 0; j < num_linear; ++j) want_eg[size_t(r) * ld + fw + j] = dlogit[r];
  }
  DeviceArray<float> d_emb = Upload(emb), d_logits = Upload(logits);
  REQUIRE_OK(LinearForward(d_emb.data(), ld, fw, num_linear, batch, d_logits.data(), nullptr));
  REQUIRE_OK(FmForward(d_emb.data(), ld, fields, dim, batch, d_logits.data(), nullptr));
  CheckClose(Download(d_logits), want, 1e-4, 1e-4);
  DeviceArray<float> d_dlogit = Upload(dlogit), d_eg = Upload(eg);
  REQUIRE_OK(
      FmBackward(d_emb.data(), ld, fields, dim, batch, d_dlogit.data(), d_eg.data(), ld, nullptr));
  REQUIRE_OK(LinearBackward(d_dlogit.data(), fw, num_linear, batch, d_eg.data(), ld, nullptr));
  CheckClose(Download(d_eg), want_eg, 1e-4, 1e-4);
}

TEST_CASE("a cross layer's elementwise step, its backward, and Add", "[cuda][interaction]") {
  const int width = GENERATE(1, 13, 429);
  const int batch = GENERATE(1, 7, 300);
  std::mt19937_64 rng(width * 1000 + batch);
  const size_t n = size_t(batch) * width;
  const std::vector<float> x0 = RandomFloats(n, &rng), x = RandomFloats(n, &rng);
  const std::vector<float> u = RandomFloats(n, &rng), bias = RandomFloats(width, &rng);
  const std::vector<float> g = RandomFloats(n, &rng), dx0 = RandomFloats(n, &rng);
  std::vector<float> want_u = u, want_next(n), want_du(n), want_dx0 = dx0, want_sum(n);
  for (size_t i = 0; i < n; ++i) {
    want_u[i] = u[i] + bias[i % width];
    want_next[i] = x0[i] * want_u[i] + x[i];
    want_du[i] = g[i] * x0[i];
    want_dx0[i] = dx0[i] + g[i] * want_u[i];
    want_sum[i] = want_dx0[i] + g[i];
  }
  DeviceArray<float> d_x0 = Upload(x0), d_x = Upload(x), d_u = Upload(u), d_b = Upload(bias);
  DeviceArray<float> d_next, d_du;
  REQUIRE_OK(d_next.Resize(n));
  REQUIRE_OK(d_du.Resize(n));
  REQUIRE_OK(CrossForward(d_x0.data(), d_x.data(), d_b.data(), batch, width, d_u.data(),
                          d_next.data(), nullptr));
  CheckClose(Download(d_u), want_u, 1e-6, 0.0);         // one addition: exact
  CheckClose(Download(d_next), want_next, 1e-5, 1e-6);  // a fused multiply-add may round once
  DeviceArray<float> d_g = Upload(g), d_dx0 = Upload(dx0);
  REQUIRE_OK(CrossBackward(d_g.data(), d_x0.data(), d_u.data(), batch, width, d_du.data(),
                           d_dx0.data(), nullptr));
  CheckClose(Download(d_du), want_du, 1e-6, 0.0);
  CheckClose(Download(d_dx0), want_dx0, 1e-5, 1e-6);
  REQUIRE_OK(Add(d_g.data(), int64_t(n), d_dx0.data(), nullptr));
  CheckClose(Download(d_dx0), want_sum, 1e-5, 1e-6);
}

}  // namespace
}  // namespace cuda
}  // namespace ps
