#include "worker/model/pooled_input.h"

#include "absl/strings/str_cat.h"

namespace ps {
namespace worker {

absl::Status CheckPooledInput(const PooledInput& in, int emb_width) {
  if (in.batch < 0) return absl::InvalidArgumentError("negative batch size");
  std::vector<uint8_t> covered(emb_width > 0 ? emb_width : 0, 0);
  for (size_t g = 0; g < in.tables.size(); ++g) {
    const PooledTable& t = in.tables[g];
    auto bad = [g](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("pooled input table ", g, ": ", what));
    };
    if (t.dim < 1) return bad("dim < 1");
    if (t.rows.size() % t.dim != 0) return bad("rows are not a multiple of dim");
    if (t.slot_mean.size() != t.slot_offset.size()) return bad("slot_mean and slot_offset differ");
    if (t.slot_offset.empty()) return bad("no slots");
    if (t.ends.size() != size_t(in.batch) * t.slot_offset.size()) {
      return bad(absl::StrCat(t.ends.size(), " ends for ", in.batch, " samples of ",
                              t.slot_offset.size(), " slots"));
    }
    uint32_t last = 0;
    for (uint32_t e : t.ends) {
      if (e < last) return bad("ends decrease");
      last = e;
    }
    if (last != t.index.size()) return bad("the last end is not index.size()");
    if (t.hit_slots.size() != t.hit_places.size() ||
        t.admit_slots.size() != t.admit_places.size()) {
      return bad("the cache's slots and places differ in number");
    }
    if ((!t.hit_slots.empty() || !t.admit_slots.empty()) && t.cache_rows < 1) {
      return bad("cache slots without a cache");
    }
    const auto within = [](absl::Span<const uint32_t> v, int64_t limit) {
      for (uint32_t x : v) {
        if (int64_t{x} >= limit) return false;
      }
      return true;
    };
    if (!within(t.hit_slots, t.cache_rows) || !within(t.admit_slots, t.cache_rows)) {
      return bad(absl::StrCat("a cache slot outside its ", t.cache_rows, " rows"));
    }
    if (!within(t.hit_places, t.num_rows()) || !within(t.admit_places, t.num_rows())) {
      return bad(absl::StrCat("a cache place outside the ", t.num_rows(), " rows"));
    }
    for (int32_t off : t.slot_offset) {
      if (off < 0 || int64_t(off) + t.dim > emb_width) {
        return bad(absl::StrCat("slot offset ", off, " of dim ", t.dim, " outside an emb row of ",
                                emb_width));
      }
      for (int c = 0; c < t.dim; ++c) {
        if (covered[off + c]++ != 0) return bad(absl::StrCat("float ", off + c, " pooled twice"));
      }
    }
  }
  for (int c = 0; c < emb_width; ++c) {
    if (covered[c] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("no slot pools float ", c, " of an emb row"));
    }
  }
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps
