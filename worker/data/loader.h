// LoadData: turns a job's DataSpec into standardised train and test sets.
//
// Kinds:
//  - FASHION_MNIST: IDX files; an empty path defaults to Debian's
//    dataset-fashion-mnist files under DefaultFashionMnistDir(). 10 classes.
//  - MNIST: IDX files; all four paths are required. 10 classes.
//  - CSV: train_csv and test_csv (both required), target_columns (unset: 1),
//    csv_has_header; see csv.h for the format.
//  - TOY_CUBIC: generated from the job seed (see toy.h); sizes default to
//    20 training and 100 test points.
//  - CIFAR10: the binary files under cifar10_dir (see cifar10.h); inputs
//    3x32x32 in CHW order, 10 classes.
//  - NUMPY: numpy_data.h; IMAGE_FOLDER: image_folder.h (the job's input
//    shape and image_fit); CSV_CLASSIFICATION: csv.h. Without a test set
//    (no test files / test_dir / test_csv) holdout_fraction of the training
//    samples is held out (split.h). These kinds read their files under
//    LoadOptions::roots without a window between check and open
//    (data_file.h), take their class count from the job's head, and their
//    limits keep evenly spaced samples (split.h TakeEvenly).
// train_limit / test_limit (0: all) cap the number of samples of each split.
//
// When spec.standardize is unset or true, inputs are standardised with
// statistics of the training split (one scalar mean/std for the IDX images,
// also for NUMPY image arrays and IMAGE_FOLDER; per-column for CSV, toy
// data and flat NUMPY arrays; CIFAR-10 uses the data set's fixed
// per-channel mean and std instead, as a per-column map of 3072 entries)
// and so are regression targets (per-column); the test split gets the same
// maps. Otherwise the returned standardizers are empty (identity).
//
// Errors: InvalidArgument for a spec that is unusable (unspecified kind,
// missing or non-existent files, all listed at once; mismatched train/test
// shapes; bad file contents). Thread-compatible (no shared state).
#ifndef TAGI_WORKER_DATA_LOADER_H_
#define TAGI_WORKER_DATA_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tagi/v1/job.pb.h"
#include "worker/data/dataset.h"
#include "worker/data/standardize.h"

namespace tagi::data {

struct LoadedData {
  TrainTest data;
  Standardizer input;   // applied to the inputs of both splits
  Standardizer target;  // applied to regression targets; empty for
                        // classification
  // DatasetFingerprint of both splits as loaded (before standardising):
  // workers compare it before training (the replica check).
  uint64_t fingerprint = 0;
};

// What the new kinds need from the job and the worker.
struct LoadOptions {
  std::vector<std::string> roots;  // empty: read anywhere (tagi-train)
  int num_classes = 0;             // the head's classes; 0: a regression head
  // The job's input shape (all 0: none given); IMAGE_FOLDER needs it.
  uint32_t channels = 0, height = 0, width = 0;
};

// The options of `job`'s head and input, with `roots`.
LoadOptions LoadOptionsFor(const tagi::v1::JobSpec& job, std::vector<std::string> roots = {});

// "/usr/share/datasets/fashion-mnist".
std::string DefaultFashionMnistDir();

// Checks that every data file the spec names (or defaults to) exists and is
// a readable regular file, and that required paths are given. Returns OK, or
// ONE InvalidArgument status listing every problem joined by "; ", each
// naming the field, e.g. "data.train_images: file /x/y does not exist".
// Does not read the files' contents.
absl::Status CheckDataFiles(const tagi::v1::DataSpec& spec);

// OK when every file (and the CIFAR-10 directory) the spec names lies under
// one of `roots` (data_roots.h); the first that does not is PermissionDenied.
// Looks at no file. tagi-worker calls it before CheckDataFiles.
absl::Status CheckDataRoots(const tagi::v1::DataSpec& spec, const std::vector<std::string>& roots);

// Loads (or generates) both splits and standardises them as described above.
absl::StatusOr<LoadedData> LoadData(const tagi::v1::DataSpec& spec,
                                    uint64_t job_seed, const LoadOptions& options = {});

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_LOADER_H_
