// NUMPY data sets: inputs and targets from .npy pairs or one .npz.
//
// Inputs x are [N, ...] of float32, float64 or uint8 (uint8 scaled by
// 1/255; floats must be finite). A 3-d x [N, H, W] is a one-channel image;
// a 4-d x is [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC, reordered to CHW
// here) as the job's layout says; other ranks are flattened per sample.
// Targets y are [N] (or [N, 1]) integer class labels for a classification
// job, or [N] / [N, k] finite numbers for a regression job.
//
// Errors are InvalidArgument naming the file (or archive member) and the
// fault: wrong dtype, rank or shape, differing sample counts, a label out
// of range, a non-finite value (with its sample index), truncation. Pure
// functions; thread-safe.
#ifndef TAGI_WORKER_DATA_NUMPY_DATA_H_
#define TAGI_WORKER_DATA_NUMPY_DATA_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tagi/v1/job.pb.h"
#include "worker/data/data_file.h"
#include "worker/data/dataset.h"
#include "worker/data/npy.h"

namespace tagi::data {

// Largest .npy file or .npz member (uncompressed) read, and largest .npz.
inline constexpr uint64_t kMaxNumpyBytes = uint64_t{8} << 30;

// `num_classes` > 0: a classification set with labels in [0, num_classes);
// 0: a regression set.
absl::StatusOr<Dataset> DatasetFromNpy(const NpyArray& x, const std::string& x_name,
                                       const NpyArray& y, const std::string& y_name,
                                       tagi::v1::DataSpec::ImageLayout layout, int num_classes);

struct NumpySplits {
  Dataset train;
  std::optional<Dataset> test;  // absent when the files hold no test set
};

// Reads the files the spec names (npz, or the .npy paths) under `access`.
absl::StatusOr<NumpySplits> LoadNumpy(const tagi::v1::DataSpec& spec, const DataAccess& access,
                                      int num_classes);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_NUMPY_DATA_H_
