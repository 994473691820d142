// Fuzzes the CSV reader (LoadCsvRegression): regression data named by a job
// and read by every worker.
//
// The first byte of an input picks the options (bits 0-1: target_columns
// 1..4; bit 2: has_header; bits 3-4: limit 0..3, 0 meaning all); the rest
// is the file, which lives in memory (MemFile). Besides the sanitizers, it
// checks that a refusal is InvalidArgument with a message, and that an
// accepted data set has the declared shape, finite inputs and targets that
// are finite or NaN (missing).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tagi::fuzz::MemFile file("csv");
  if (size == 0) return 0;
  const size_t target_columns = (data[0] & 3u) + 1;
  const bool has_header = (data[0] & 4u) != 0;
  const size_t limit = (data[0] >> 3) & 3u;
  const std::string& path = file.Write(data + 1, size - 1);
  auto set = tagi::data::LoadCsvRegression(path, target_columns, has_header, limit);
  if (!set.ok()) {
    FUZZ_CHECK(set.status().code() == absl::StatusCode::kInvalidArgument &&
                   !set.status().message().empty(),
               "refused with %s", set.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(set->num_samples > 0 && set->input_dim > 0, "empty data set accepted");
  FUZZ_CHECK(set->output_dim == target_columns && !set->is_classification(), "wrong kind");
  FUZZ_CHECK(limit == 0 || set->num_samples <= limit, "limit %zu ignored", limit);
  FUZZ_CHECK(set->inputs.size() == set->num_samples * set->input_dim &&
                 set->targets.size() == set->num_samples * set->output_dim,
             "inconsistent shape");
  for (float x : set->inputs) FUZZ_CHECK(std::isfinite(x), "input %g", x);
  for (float y : set->targets) FUZZ_CHECK(!std::isinf(y), "target %g", y);
  return 0;
}
