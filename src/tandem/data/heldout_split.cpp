#include "tandem/data/heldout_split.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/datasets.h"

namespace tandem {

bool is_heldout(std::string_view canonical_record, uint64_t seed, double fraction) {
  Hasher hash;
  hash.update_u64(seed).update_field(canonical_record);
  // The top 53 bits as a double in [0, 1).
  const double u = static_cast<double>(hash.digest() >> 11) * 0x1.0p-53;
  return u < fraction;
}

std::string canonical_record(std::string_view record_text) {
  return ordered_line(record_text).dump();
}

bool HeldoutOptions::keeps(std::string_view record_text) const {
  if (!active()) return true;
  return is_heldout(canonical_record(record_text), seed, fraction) == keep_heldout;
}

SplitCounts split_records(const std::string& path, double fraction, uint64_t seed,
                          const std::string& train_path, const std::string& heldout_path,
                          OnError on_error) {
  check(std::isfinite(fraction) && fraction > 0 && fraction < 1,
        "[data] split: the held-out fraction must lie in (0, 1), not ", fraction);
  check(train_path != heldout_path,
        "[data] split: the train and held-out outputs are the same "
        "file (",
        train_path, ")");
  for (const std::string& out : {train_path, heldout_path}) {
    check(out != path, "[data] split: ", out, " is the input itself");
    check(!std::filesystem::exists(out), "[data] split: ", out,
          " exists; tandem does not write over it (remove it or choose another name)");
  }
  const std::string suffix = ".tmp-" + std::to_string(::getpid());
  const std::string train_tmp = train_path + suffix, heldout_tmp = heldout_path + suffix;
  SplitCounts counts;
  try {
    std::ofstream train(train_tmp, std::ios::binary), heldout(heldout_tmp, std::ios::binary);
    check(train.good(), "[data] split: cannot write ", train_tmp);
    check(heldout.good(), "[data] split: cannot write ", heldout_tmp);
    JsonlReader reader(path, on_error);
    nlohmann::json value;
    while (reader.next(value)) {
      const std::string canonical = canonical_record(reader.line_text());
      const bool held = is_heldout(canonical, seed, fraction);
      (held ? heldout : train) << canonical << '\n';
      ++(held ? counts.heldout : counts.train);
    }
    counts.skipped = reader.skipped();
    train.close();
    heldout.close();
    check(train.good() && heldout.good(), "[data] split: writing ", train_tmp, " or ", heldout_tmp,
          " failed (disk full?)");
    std::filesystem::rename(train_tmp, train_path);
    std::filesystem::rename(heldout_tmp, heldout_path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(train_tmp, ignored);
    std::filesystem::remove(heldout_tmp, ignored);
    throw;
  }
  return counts;
}

}  // namespace tandem
