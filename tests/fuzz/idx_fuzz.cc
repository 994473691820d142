// Fuzzes the IDX reader (ReadIdx, LoadIdxClassification): MNIST-style
// files, raw or gzip, named by a job and read by every worker.
//
// An input is an image file, optionally followed by the separator
// "IDXLABELS" and a label file. The image part goes through ReadIdx; with a
// separator, both parts go through LoadIdxClassification (10 classes, the
// first size % 4 samples, 0 meaning all). The files live in memory
// (MemFile). Besides the sanitizers and libFuzzer's malloc limit, it checks
// that a refusal is InvalidArgument with a message and that what is
// accepted has the shape its header declares.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/idx.h"

namespace {

constexpr std::string_view kSeparator = "IDXLABELS";
constexpr int kClasses = 10;

void CheckRefusal(const absl::Status& status) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument && !status.message().empty(),
             "refused with %s", status.ToString().c_str());
}

void CheckArray(const std::string& path) {
  auto array = tagi::data::ReadIdx(path);
  if (!array.ok()) {
    CheckRefusal(array.status());
    return;
  }
  FUZZ_CHECK(!array->dims.empty(), "no dimensions");
  uint64_t product = 1;
  for (uint32_t d : array->dims) product *= d;
  FUZZ_CHECK(array->data.size() == product, "%zu bytes for %llu elements", array->data.size(),
             static_cast<unsigned long long>(product));
}

void CheckDataset(const std::string& images, const std::string& labels, size_t limit) {
  auto set = tagi::data::LoadIdxClassification(images, labels, kClasses, limit);
  if (!set.ok()) {
    CheckRefusal(set.status());
    return;
  }
  FUZZ_CHECK(set->num_samples > 0 && set->input_dim > 0, "empty data set accepted");
  FUZZ_CHECK(limit == 0 || set->num_samples <= limit, "limit %zu ignored", limit);
  FUZZ_CHECK(set->labels.size() == set->num_samples &&
                 set->inputs.size() == set->num_samples * set->input_dim,
             "inconsistent shape");
  for (int32_t label : set->labels) FUZZ_CHECK(label >= 0 && label < kClasses, "label %d", label);
  for (float x : set->inputs) FUZZ_CHECK(x >= 0.0f && x <= 1.0f, "pixel %g", x);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tagi::fuzz::MemFile images("idx_images");
  static tagi::fuzz::MemFile labels("idx_labels");
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kSeparator);
  const std::string_view image_part = input.substr(0, split);
  const std::string& images_path = images.Write(image_part.data(), image_part.size());
  CheckArray(images_path);
  if (split == std::string_view::npos) return 0;
  const std::string_view label_part = input.substr(split + kSeparator.size());
  CheckDataset(images_path, labels.Write(label_part.data(), label_part.size()), size % 4);
  return 0;
}
