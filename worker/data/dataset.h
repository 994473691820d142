// Dataset: an in-memory table of samples, the common currency of the data
// module.
//
// A dataset is either a classification set (num_classes > 0, one integer
// label per sample, `targets` empty) or a regression set (num_classes == 0,
// output_dim floats per sample in `targets`, `labels` empty). Inputs are
// always dense float rows. Plain value type: copyable, movable, no hidden
// state, safe to read from many threads.
#ifndef TAGI_WORKER_DATA_DATASET_H_
#define TAGI_WORKER_DATA_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tagi::data {

struct Dataset {
  size_t num_samples = 0;
  size_t input_dim = 0;
  size_t output_dim = 0;  // regression: targets per sample; classification: 0
  int num_classes = 0;    // classification only (0 for regression)
  std::vector<float> inputs;    // [num_samples][input_dim], row-major
  std::vector<float> targets;   // regression: [num_samples][output_dim];
                                // NaN = missing target
  std::vector<int32_t> labels;  // classification: [num_samples], each in
                                // [0, num_classes)
  // Image data: the (C, H, W) of one sample, inputs in CHW order; all 0
  // when the reader does not know (flat data, or kinds that never set it).
  uint32_t channels = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  // Classification data whose classes have names (an image folder's
  // sub-folders): num_classes names, label i is class_names[i]; else empty.
  std::vector<std::string> class_names;
  bool is_classification() const { return num_classes > 0; }
};

struct TrainTest {
  Dataset train;
  Dataset test;
};

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_DATASET_H_
