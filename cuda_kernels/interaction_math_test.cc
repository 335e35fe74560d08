// The per-thread functions of interaction.h's kernels (internal/interaction_math.h), run on the
// host over every thread index a launch covers, against plain loops written as the CPU model
// writes them (worker/model/cpu_model.cc): the index arithmetic, the layouts with leading
// dimensions and the order of every sum are checked here, without a GPU.
#include "cuda_kernels/internal/interaction_math.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

namespace ps {
namespace cuda {
namespace internal {
namespace {

std::vector<float> RandomFloats(size_t n, std::mt19937_64* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

// Elementwise within a few float roundings (the sums run in the same order, so in practice the
// same bits; a compiler may still contract a multiply-add).
void CheckClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("PairOf inverts PairIndex in the packing (1,0), (2,0), (2,1), (3,0), ...",
          "[cuda][interaction]") {
  int p = 0;
  for (int i = 1; i <= 40; ++i) {
    for (int j = 0; j < i; ++j, ++p) {
      CHECK(PairIndex(i, j) == p);
      int a = -1, b = -1;
      PairOf(p, &a, &b);
      CHECK(a == i);
      CHECK(b == j);
    }
  }
  CHECK(NumPairs(40) == p);
  CHECK(NumPairs(0) == 0);
  CHECK(NumPairs(1) == 1);
}

TEST_CASE("the dot interaction and its backward, thread by thread", "[cuda][interaction]") {
  const int fields = GENERATE(0, 1, 2, 5, 26);
  const int dim = GENERATE(1, 3, 16);
  const int batch = GENERATE(1, 7);
  INFO("fields " << fields << ", dim " << dim << ", batch " << batch);
  const int n = fields + 1;
  const int pairs = NumPairs(fields);
  // Every matrix inside wider rows, at an offset, as the GPU model lays them out.
  const int64_t z_ld = dim + 2, emb_ld = int64_t(fields) * dim + 3, out_ld = dim + pairs + 1;
  const int out_off = dim;  // dots after z's columns in the top MLP's input
  std::mt19937_64 rng(fields * 100 + dim * 10 + batch);
  const std::vector<float> z = RandomFloats(batch * z_ld, &rng);
  const std::vector<float> emb = RandomFloats(batch * emb_ld, &rng);
  auto vec = [&](int r, int i) {
    return i == 0 ? &z[size_t(r) * z_ld] : &emb[size_t(r) * emb_ld + size_t(i - 1) * dim];
  };

  // Forward: the reference loops over i > j in packing order.
  std::vector<float> want(batch * out_ld, 7.0f);
  for (int r = 0; r < batch; ++r) {
    int p = 0;
    for (int i = 1; i < n; ++i) {
      for (int j = 0; j < i; ++j, ++p) {
        float s = 0;
        for (int k = 0; k < dim; ++k) s += vec(r, i)[k] * vec(r, j)[k];
        want[size_t(r) * out_ld + out_off + p] = s;
      }
    }
  }
  const DotArgs a{z.data(), z_ld, emb.data(), emb_ld, batch, fields, dim};
  std::vector<float> got(batch * out_ld, 7.0f);
  REQUIRE(DotForwardThreads(a) == int64_t(batch) * pairs);
  for (int64_t t = 0; t < DotForwardThreads(a); ++t) {
    DotForwardThread(t, a, got.data() + out_off, out_ld);
  }
  CheckClose(got, want);

  // Backward, as the CPU model: G the symmetric n x n matrix of the pair gradients (zero
  // diagonal), dv_i = sum_j G_ij v_j; dv_0 added to z's gradient, the rest written.
  const int64_t g_ld = pairs + 4, zg_ld = dim + 1, eg_ld = int64_t(fields) * dim + 2;
  const std::vector<float> g = RandomFloats(batch * g_ld, &rng);
  const std::vector<float> zg0 = RandomFloats(batch * zg_ld, &rng);
  std::vector<float> want_zg = zg0, want_eg(batch * eg_ld, 5.0f);
  for (int r = 0; r < batch; ++r) {
    std::vector<float> sym(size_t(n) * n, 0.0f);
    for (int i = 1; i < n; ++i) {
      for (int j = 0; j < i; ++j) {
        sym[size_t(i) * n + j] = sym[size_t(j) * n + i] = g[size_t(r) * g_ld + i * (i - 1) / 2 + j];
      }
    }
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < dim; ++k) {
        float acc = 0;
        for (int j = 0; j < n; ++j) acc += sym[size_t(i) * n + j] * vec(r, j)[k];
        if (i == 0) {
          want_zg[size_t(r) * zg_ld + k] += acc;
        } else {
          want_eg[size_t(r) * eg_ld + size_t(i - 1) * dim + k] = acc;
        }
      }
    }
  }
  std::vector<float> got_zg = zg0, got_eg(batch * eg_ld, 5.0f);
  REQUIRE(DotBackwardThreads(a) == int64_t(batch) * n * dim);
  if (fields > 0) {  // the launcher launches nothing without a pair
    for (int64_t t = 0; t < DotBackwardThreads(a); ++t) {
      DotBackwardThread(t, a, g.data(), g_ld, got_zg.data(), zg_ld, got_eg.data(), eg_ld);
    }
  }
  CheckClose(got_zg, want_zg);
  CheckClose(got_eg, want_eg);
}

TEST_CASE("the FM term, the linear sum and their backward, thread by thread",
          "[cuda][interaction]") {
  const int fields = GENERATE(1, 2, 26);
  const int dim = GENERATE(1, 4, 16);
  const int num_linear = GENERATE(0, 1, 26);
  const int batch = GENERATE(1, 5);
  INFO("fields " << fields << ", dim " << dim << ", linear " << num_linear << ", batch " << batch);
  const int fw = fields * dim;
  const int64_t emb_ld = fw + num_linear;  // model_spec.h's rows: fields, then linear inputs
  const int64_t eg_ld = emb_ld;
  std::mt19937_64 rng(fields * 1000 + dim * 100 + num_linear * 10 + batch);
  const std::vector<float> emb = RandomFloats(batch * emb_ld, &rng);
  const std::vector<float> logits0 = RandomFloats(batch, &rng);
  const std::vector<float> dlogit = RandomFloats(batch, &rng);
  const std::vector<float> eg0 = RandomFloats(batch * eg_ld, &rng);

  // Forward as the CPU model: logit + linear sum + 0.5 (total - squares).
  std::vector<float> want = logits0;
  for (int r = 0; r < batch; ++r) {
    const float* er = &emb[size_t(r) * emb_ld];
    float s = 0;
    for (int j = 0; j < num_linear; ++j) s += er[fw + j];
    want[r] += s;
    std::vector<float> sum(dim, 0.0f);
    float squares = 0;
    for (int f = 0; f < fields; ++f) {
      for (int k = 0; k < dim; ++k) {
        sum[k] += er[f * dim + k];
        squares += er[f * dim + k] * er[f * dim + k];
      }
    }
    float total = 0;
    for (int k = 0; k < dim; ++k) total += sum[k] * sum[k];
    want[r] += 0.5f * (total - squares);
  }
  std::vector<float> got = logits0;
  if (num_linear > 0) {
    for (int64_t r = 0; r < batch; ++r) {
      LinearForwardThread(r, emb.data(), emb_ld, fw, num_linear, got.data());
    }
  }
  for (int64_t r = 0; r < batch; ++r) {
    FmForwardThread(r, emb.data(), emb_ld, fields, dim, got.data());
  }
  CheckClose(got, want);

  // Backward: the fields' gradient gains dlogit (sum - e), the linear inputs' is dlogit.
  std::vector<float> want_eg = eg0;
  for (int r = 0; r < batch; ++r) {
    const float* er = &emb[size_t(r) * emb_ld];
    float* gr = &want_eg[size_t(r) * eg_ld];
    std::vector<float> sum(dim, 0.0f);
    for (int f = 0; f < fields; ++f) {
      for (int k = 0; k < dim; ++k) sum[k] += er[f * dim + k];
    }
    for (int f = 0; f < fields; ++f) {
      for (int k = 0; k < dim; ++k) gr[f * dim + k] += dlogit[r] * (sum[k] - er[f * dim + k]);
    }
    for (int j = 0; j < num_linear; ++j) gr[fw + j] = dlogit[r];
  }
  std::vector<float> got_eg = eg0;
  for (int64_t t = 0; t < int64_t(batch) * fields * dim; ++t) {
    FmBackwardThread(t, emb.data(), emb_ld, fields, dim, dlogit.data(), got_eg.data(), eg_ld);
  }
  for (int64_t t = 0; t < int64_t(batch) * num_linear; ++t) {
    LinearBackwardThread(t, dlogit.data(), fw, num_linear, got_eg.data(), eg_ld);
  }
  CheckClose(got_eg, want_eg);
}

TEST_CASE("a cross layer's elementwise part and its backward, thread by thread",
          "[cuda][interaction]") {
  const int width = GENERATE(1, 13, 429);
  const int batch = GENERATE(1, 3);
  std::mt19937_64 rng(width * 10 + batch);
  const size_t n = size_t(batch) * width;
  const std::vector<float> x0 = RandomFloats(n, &rng), x = RandomFloats(n, &rng);
  const std::vector<float> u0 = RandomFloats(n, &rng), bias = RandomFloats(width, &rng);
  const std::vector<float> g = RandomFloats(n, &rng), dx00 = RandomFloats(n, &rng);
  std::vector<float> want_u = u0, want_next(n), want_du(n), want_dx0 = dx00;
  for (int r = 0; r < batch; ++r) {
    for (int k = 0; k < width; ++k) {
      const size_t o = size_t(r) * width + k;
      want_u[o] += bias[k];
      want_next[o] = x0[o] * want_u[o] + x[o];
      want_du[o] = g[o] * x0[o];
      want_dx0[o] += g[o] * want_u[o];
    }
  }
  std::vector<float> u = u0, next(n, 0.0f), du(n, 0.0f), dx0 = dx00;
  for (int64_t t = 0; t < int64_t(n); ++t) {
    CrossForwardThread(t, width, x0.data(), x.data(), bias.data(), u.data(), next.data());
  }
  CheckClose(u, want_u);
  CheckClose(next, want_next);
  for (int64_t t = 0; t < int64_t(n); ++t) {
    CrossBackwardThread(t, g.data(), x0.data(), u.data(), du.data(), dx0.data());
  }
  CheckClose(du, want_du);
  CheckClose(dx0, want_dx0);
  std::vector<float> sum = dx0;
  for (int64_t t = 0; t < int64_t(n); ++t) AddThread(t, g.data(), sum.data());
  for (size_t i = 0; i < n; ++i) CHECK(sum[i] == dx0[i] + g[i]);
}

}  // namespace
}  // namespace internal
}  // namespace cuda
}  // namespace ps
