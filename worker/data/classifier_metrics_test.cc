#include "worker/data/classifier_metrics.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace ps {
namespace worker {
namespace {

// The AUC by definition: over every (positive, negative) pair, 1 if the positive scores higher,
// 1/2 on a tie.
double BruteForceAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double wins = 0;
  double pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] <= 0.5f) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] > 0.5f) continue;
      pairs += 1;
      if (scores[i] > scores[j]) wins += 1;
      if (scores[i] == scores[j]) wins += 0.5;
    }
  }
  return pairs == 0 ? 0.5 : wins / pairs;
}

double BruteForceLogLoss(const std::vector<float>& p, const std::vector<float>& y) {
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::min(std::max(static_cast<double>(p[i]), 1e-7), 1 - 1e-7);
    sum += y[i] > 0.5f ? -std::log(q) : -std::log(1 - q);
  }
  return sum / p.size();
}

// n random scores in [0, 1], rounded to `levels` values when levels > 0 (to make ties), and
// labels that are positive with a probability rising with the score.
void RandomInput(uint32_t seed, int n, int levels, std::vector<float>* scores,
                 std::vector<float>* labels) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  scores->clear();
  labels->clear();
  for (int i = 0; i < n; ++i) {
    float s = uniform(rng);
    if (levels > 0) s = std::floor(s * levels) / levels;
    scores->push_back(s);
    labels->push_back(uniform(rng) < 0.2f + 0.6f * s ? 1.0f : 0.0f);
  }
}

TEST_CASE("Auc and LogLoss match brute force on small random inputs", "[worker][metrics]") {
  const uint32_t seed = GENERATE(range(1u, 21u));
  const int n = GENERATE(1, 2, 7, 50, 300);
  const int levels = GENERATE(0, 3, 20);
  std::vector<float> scores, labels;
  RandomInput(seed, n, levels, &scores, &labels);
  CHECK(Auc(scores, labels) == Approx(BruteForceAuc(scores, labels)).epsilon(1e-12));
  CHECK(LogLoss(scores, labels) == Approx(BruteForceLogLoss(scores, labels)).epsilon(1e-9));
}

TEST_CASE("Auc of known inputs", "[worker][metrics]") {
  CHECK(Auc({0.1f, 0.9f}, {0, 1}) == 1.0);
  CHECK(Auc({0.9f, 0.1f}, {0, 1}) == 0.0);
  CHECK(Auc({0.5f, 0.5f}, {0, 1}) == 0.5);
  // Positives at 0.8 and 0.3; negatives at 0.3 and 0.1: (1 + 1) + (0.5 + 1) over 4 pairs.
  CHECK(Auc({0.8f, 0.3f, 0.3f, 0.1f}, {1, 1, 0, 0}) == Approx(3.5 / 4));
  // Scores need not be probabilities; NaN sorts lowest.
  CHECK(Auc({-3.0f, 7.0f}, {0, 1}) == 1.0);
  CHECK(Auc({std::numeric_limits<float>::quiet_NaN(), 0.0f}, {0, 1}) == 1.0);
}

TEST_CASE("Auc is one half with a single class", "[worker][metrics]") {
  CHECK(Auc({}, {}) == 0.5);
  CHECK(Auc({0.1f, 0.7f, 0.3f}, {1, 1, 1}) == 0.5);
  CHECK(Auc({0.1f, 0.7f, 0.3f}, {0, 0, 0}) == 0.5);
  StreamingAuc streaming;
  streaming.Add({0.1f, 0.7f}, {1, 1});
  CHECK(streaming.Auc() == 0.5);
}

TEST_CASE("metrics of spans whose sizes differ are NaN", "[worker][metrics]") {
  CHECK(std::isnan(Auc({0.1f, 0.2f}, {1})));
  CHECK(std::isnan(LogLoss({0.1f}, {1, 0})));
}

TEST_CASE("LogLoss clips probabilities at 1e-7", "[worker][metrics]") {
  CHECK(LogLoss({}, {}) == 0.0);
  CHECK(LogLoss({0.0f}, {1}) == Approx(-std::log(1e-7)));
  CHECK(LogLoss({1.0f}, {0}) == Approx(-std::log(1e-7)).epsilon(1e-6));
  CHECK(LogLoss({1.0f, 0.0f}, {1, 0}) == Approx(-std::log(1 - 1e-7)));
  CHECK(LogLoss({std::numeric_limits<float>::quiet_NaN()}, {1}) == Approx(-std::log(1e-7)));
  CHECK(LogLoss({0.5f}, {1}) == Approx(std::log(2.0)));
  // Soft labels.
  CHECK(LogLoss({0.25f}, {0.5f}) == Approx(-0.5 * std::log(0.25) - 0.5 * std::log(0.75)));
}

TEST_CASE("StreamingAuc is exact when scores lie on bucket boundaries", "[worker][metrics]") {
  const uint32_t seed = GENERATE(range(1u, 11u));
  std::vector<float> scores, labels;
  // 1000 levels: every distinct score has its own bucket (the width is 1/65536).
  RandomInput(seed, 2000, 1000, &scores, &labels);
  StreamingAuc streaming;
  streaming.Add(scores, labels);
  CHECK(streaming.Auc() == Approx(Auc(scores, labels)).epsilon(1e-12));
  CHECK(streaming.positives() + streaming.negatives() == 2000);
}

TEST_CASE("StreamingAuc is close to Auc on continuous scores", "[worker][metrics]") {
  const uint32_t seed = GENERATE(range(1u, 6u));
  std::vector<float> scores, labels;
  RandomInput(seed, 100000, 0, &scores, &labels);
  StreamingAuc streaming;
  for (size_t i = 0; i < scores.size(); ++i) streaming.Add(scores[i], labels[i]);
  CHECK(std::abs(streaming.Auc() - Auc(scores, labels)) < 1e-4);
}

TEST_CASE("StreamingAuc clamps scores outside [0, 1]", "[worker][metrics]") {
  StreamingAuc streaming;
  streaming.Add({-5.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f}, {0, 1, 0, 1});
  CHECK(streaming.Auc() == 1.0);
  streaming.Add(-1.0f, 1.0f);  // ties with the two negatives in the lowest bucket
  CHECK(streaming.Auc() == Approx((2 + 2 + 0.5 + 0.5) / 6.0));
}

TEST_CASE("StreamingAuc merges and resets", "[worker][metrics]") {
  std::vector<float> scores, labels;
  RandomInput(7, 4000, 500, &scores, &labels);
  StreamingAuc whole, first, second;
  whole.Add(scores, labels);
  first.Add(absl::MakeConstSpan(scores).subspan(0, 1500),
            absl::MakeConstSpan(labels).subspan(0, 1500));
  second.Add(absl::MakeConstSpan(scores).subspan(1500), absl::MakeConstSpan(labels).subspan(1500));
  first.Merge(second);
  CHECK(first.Auc() == whole.Auc());
  CHECK(first.positives() == whole.positives());
  CHECK(first.negatives() == whole.negatives());
  first.Reset();
  CHECK(first.positives() == 0);
  CHECK(first.negatives() == 0);
  CHECK(first.Auc() == 0.5);
}

}  // namespace
}  // namespace worker
}  // namespace ps
