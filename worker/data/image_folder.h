// IMAGE_FOLDER data sets: one sub-folder per class of PNG / JPEG images.
//
// The class names are the sub-folders' names sorted bytewise (label i is
// the i-th); files are read in sorted order too, so every worker builds the
// same data set in the same order. Files ending in .png, .jpg or .jpeg (any
// case) are images; other files and names starting with '.' are skipped.
// The folder is opened under the data roots (data_file.h) and walked by
// descriptor: a symlinked class folder or image is refused, never followed.
// Every image is decoded once (image.h) and fitted to the job's
// channels x height x width; the set holds CHW floats in [0, 1].
//
// Errors are InvalidArgument naming the folder or file: no class folders,
// more than kMaxImageClasses, an empty class folder, an undecodable image,
// an image file over kMaxImageFileBytes, more than kMaxImagesPerSet images,
// a test class that the training folder lacks. Thread-compatible.
#ifndef TAGI_WORKER_DATA_IMAGE_FOLDER_H_
#define TAGI_WORKER_DATA_IMAGE_FOLDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tagi/v1/job.pb.h"
#include "worker/data/data_file.h"
#include "worker/data/dataset.h"

namespace tagi::data {

inline constexpr size_t kMaxImageClasses = 4096;
inline constexpr size_t kMaxImagesPerSet = 10'000'000;
inline constexpr uint64_t kMaxImageFileBytes = uint64_t{64} << 20;

struct ImageShape {
  uint32_t channels = 0;  // 1 or 3
  uint32_t height = 0;
  uint32_t width = 0;
};

// Reads `dir` (the job field `field`). `classes` empty: the classes are
// `dir`'s sub-folders; else they are `classes` (the training set's), and a
// sub-folder not among them is an error.
absl::StatusOr<Dataset> LoadImageFolder(const std::string& field, const std::string& dir,
                                        const DataAccess& access, const ImageShape& shape,
                                        tagi::v1::DataSpec::ImageFit fit,
                                        const std::vector<std::string>& classes);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_IMAGE_FOLDER_H_
