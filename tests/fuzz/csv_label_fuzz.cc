// Fuzzes the CSV classification reader (ParseCsvClassification): the label
// column of a CSV_CLASSIFICATION job's files.
//
// The first byte picks the options (bit 0: has_header; bit 1: the label by
// name "y", else by index; bits 2-3: the index 0..3; bits 4-5: classes 1..4);
// the rest is the text. Besides the sanitizers, it checks that a refusal is
// InvalidArgument with a message, and that an accepted set has labels in
// range, finite features and the declared shape.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool header = (data[0] & 1u) != 0;
  tagi::data::CsvLabel label;
  if (data[0] & 2u) {
    label.name = "y";
  } else {
    label.index = (data[0] >> 2) & 3u;
  }
  const int classes = ((data[0] >> 4) & 3) + 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto d = tagi::data::ParseCsvClassification(text, "f.csv", label, header, classes);
  if (!d.ok()) {
    FUZZ_CHECK(
        d.status().code() == absl::StatusCode::kInvalidArgument && !d.status().message().empty(),
        "refused with %s", d.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(d->num_samples > 0 && d->input_dim > 0, "empty set accepted");
  FUZZ_CHECK(
      d->inputs.size() == d->num_samples * d->input_dim && d->labels.size() == d->num_samples,
      "inconsistent shape");
  for (float x : d->inputs) FUZZ_CHECK(std::isfinite(x), "feature %g", x);
  for (int32_t y : d->labels) FUZZ_CHECK(y >= 0 && y < classes, "label %d", y);
  return 0;
}
