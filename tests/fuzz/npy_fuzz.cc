// Fuzzes the NPY reader (ParseNpy) and the conversion of an array to a data
// set (DatasetFromNpy): the header every NUMPY job's files start with.
//
// The first byte picks the options (bit 0: NHWC layout; bits 1-2: classes
// 0 (regression), 2, 3 or 10); the rest is the file, used as both x and y.
// Besides the sanitizers, it checks that a refusal is InvalidArgument with a
// message, that an accepted array's data span is exactly its shape's bytes,
// and that an accepted data set is consistent and finite.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/numpy_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto layout = (data[0] & 1u) ? tagi::v1::DataSpec::NHWC : tagi::v1::DataSpec::NCHW;
  static constexpr int kClasses[] = {0, 2, 3, 10};
  const int classes = kClasses[(data[0] >> 1) & 3u];
  const std::span<const uint8_t> file(data + 1, size - 1);
  auto a = tagi::data::ParseNpy(file, "f.npy", 1 << 20);
  if (!a.ok()) {
    FUZZ_CHECK(
        a.status().code() == absl::StatusCode::kInvalidArgument && !a.status().message().empty(),
        "refused with %s", a.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(a->data.size() == a->count() * tagi::data::ElementBytes(a->type),
             "data span of %zu bytes for %llu elements", a->data.size(),
             static_cast<unsigned long long>(a->count()));
  FUZZ_CHECK(a->data.data() + a->data.size() == file.data() + file.size(), "span not at the end");
  auto d = tagi::data::DatasetFromNpy(*a, "x.npy", *a, "y.npy", layout, classes);
  if (!d.ok()) {
    FUZZ_CHECK(d.status().code() == absl::StatusCode::kInvalidArgument, "refused with %s",
               d.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(d->num_samples > 0 && d->inputs.size() == d->num_samples * d->input_dim,
             "inconsistent inputs");
  for (float x : d->inputs) FUZZ_CHECK(std::isfinite(x), "input %g", x);
  if (classes > 0) {
    FUZZ_CHECK(d->labels.size() == d->num_samples, "labels");
    for (int32_t y : d->labels) FUZZ_CHECK(y >= 0 && y < classes, "label %d", y);
  } else {
    FUZZ_CHECK(d->targets.size() == d->num_samples * d->output_dim, "targets");
    for (float y : d->targets) FUZZ_CHECK(std::isfinite(y), "target %g", y);
  }
  return 0;
}
