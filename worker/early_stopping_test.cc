#include "worker/early_stopping.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace ps {
namespace worker {
namespace {

config::EarlyStopping Options(config::EarlyStopping::Metric metric, uint32_t patience,
                              float min_delta = 0) {
  config::EarlyStopping o;
  o.set_metric(metric);
  o.set_patience(patience);
  o.set_min_delta(min_delta);
  return o;
}

TEST_CASE("AUC: stops after patience evaluations without a new best", "[worker][early_stopping]") {
  EarlyStopping es(Options(config::EarlyStopping::AUC, 2));
  CHECK_FALSE(es.Update(10, 0.70, 0.5));
  CHECK_FALSE(es.Update(20, 0.75, 0.5));
  CHECK_FALSE(es.Update(30, 0.74, 0.5));  // one without improvement
  CHECK(es.best_step() == 20);
  CHECK_FALSE(es.Update(40, 0.76, 0.5));  // a new best resets the count
  CHECK_FALSE(es.Update(50, 0.76, 0.5));  // equal is not better
  CHECK(es.Update(60, 0.75, 0.5));
  CHECK(es.best() == 0.76);
  CHECK(es.best_step() == 40);
  CHECK(es.since_best() == 2);
}

TEST_CASE("LOGLOSS: lower is better, by more than min_delta", "[worker][early_stopping]") {
  EarlyStopping es(Options(config::EarlyStopping::LOGLOSS, 1, 0.01f));
  CHECK_FALSE(es.Update(1, 0.5, 0.50));
  CHECK_FALSE(es.Update(2, 0.5, 0.45));
  CHECK(es.Update(3, 0.9, 0.445));  // better, but by less than min_delta
  CHECK(es.best_step() == 2);
}

TEST_CASE("a NaN metric never counts as an improvement", "[worker][early_stopping]") {
  EarlyStopping es(Options(config::EarlyStopping::AUC, 2));
  CHECK_FALSE(es.Update(1, std::nan(""), 0.5));
  CHECK(es.Update(2, std::nan(""), 0.5));
  CHECK(es.best_step() == -1);
}

}  // namespace
}  // namespace worker
}  // namespace ps
