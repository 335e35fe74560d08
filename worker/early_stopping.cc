#include "worker/early_stopping.h"

#include <cmath>
#include <limits>

namespace ps {
namespace worker {

EarlyStopping::EarlyStopping(const config::EarlyStopping& options)
    : options_(options),
      best_(options.metric() == config::EarlyStopping::AUC
                ? -std::numeric_limits<double>::infinity()
                : std::numeric_limits<double>::infinity()) {}

bool EarlyStopping::Update(int64_t step, double auc, double logloss) {
  const bool higher_is_better = options_.metric() == config::EarlyStopping::AUC;
  const double value = higher_is_better ? auc : logloss;
  const double delta = options_.min_delta();
  const bool improved =
      !std::isnan(value) && (higher_is_better ? value > best_ + delta : value < best_ - delta);
  if (improved) {
    best_ = value;
    best_step_ = step;
    since_best_ = 0;
    return false;
  }
  ++since_best_;
  return since_best_ >= options_.patience();
}

}  // namespace worker
}  // namespace ps
