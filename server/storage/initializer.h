// Initial values of embedding rows.
//
// A row is a pure function of (seed, table name, id): every server, replica and restart creates the
// same floats, bit for bit, on every platform. So the random numbers come from a counter-based
// generator of our own (splitmix64's mixer over a counter keyed by XXH3 of seed, table and id) and
// the transcendental functions the normal distributions need are computed by this component with
// IEEE basic arithmetic only, never by std:: distributions or libm, whose results differ between
// library versions.
#ifndef PS_SERVER_STORAGE_INITIALIZER_H_
#define PS_SERVER_STORAGE_INITIALIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace ps {
namespace server {

// An Initializer fills new rows of one table. Thread-compatible (Fill is const and keeps no state).
//
//   ZEROS             0
//   UNIFORM           U[low, high)
//   NORMAL            N(mean, stddev), Box-Muller in Marsaglia's polar form
//   TRUNCATED_NORMAL  N(mean, stddev), draws outside mean +- 2 stddev drawn again
class Initializer {
 public:
  // Returns the initializer of `options` for the table `table` of a job seeded with `job_seed`.
  // A non-zero options.seed() is mixed into the job's seed; 0 uses the job's seed alone.
  // INVALID_ARGUMENT for an unknown kind or bad parameters, by the rules of common/job_config.cc:
  // uniform needs finite low < high, the normals a finite mean and a finite stddev > 0.
  static absl::StatusOr<std::unique_ptr<Initializer>> Create(const config::Initializer& options,
                                                             uint64_t job_seed,
                                                             absl::string_view table);

  Initializer(const Initializer&) = delete;
  Initializer& operator=(const Initializer&) = delete;

  // Writes the `dim` initial floats of row `id` to `out`. The first k floats do not depend on dim.
  void Fill(uint64_t id, uint32_t dim, float* out) const;

 private:
  Initializer(const config::Initializer& options, uint64_t table_key);

  const config::Initializer::Kind kind_;
  const float low_;
  const float high_;
  const float mean_;
  const float stddev_;
  // Keys the random stream of each row: XXH3 of the table name, seeded with the effective seed.
  const uint64_t table_key_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORAGE_INITIALIZER_H_
