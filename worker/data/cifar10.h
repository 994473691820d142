// CIFAR-10 reader: the data set's binary version.
//
// A directory holds data_batch_1.bin .. data_batch_5.bin (the training
// split, read in that order) and test_batch.bin. Each file is a sequence of
// 3073-byte records: one label byte (0..9), then the 3x32x32 image as 1024
// red, 1024 green and 1024 blue bytes, each plane row-major. The loaded
// inputs keep that order (CHW, input_dim 3072), scaled to [0, 1] by
// value / 255; the set has 10 classes.
//
// Memory is bounded: every file's size is checked before it is opened (a
// whole number of records, at least one, at most kMaxCifar10FileBytes), and
// records are read one at a time into the output.
//
// Errors: InvalidArgument naming the file and what was expected (missing or
// unreadable files, all listed at once; a size that is not a whole number of
// records; a label above 9; a file that changed while being read). Functions
// are thread-compatible (no shared state).
#ifndef TAGI_WORKER_DATA_CIFAR10_H_
#define TAGI_WORKER_DATA_CIFAR10_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace tagi::data {

inline constexpr size_t kCifar10Channels = 3;
inline constexpr size_t kCifar10Side = 32;
inline constexpr size_t kCifar10Pixels = kCifar10Channels * kCifar10Side * kCifar10Side;
inline constexpr size_t kCifar10RecordBytes = 1 + kCifar10Pixels;  // 3073
inline constexpr int kCifar10Classes = 10;
// A batch file of the data set has 10000 records (30,730,000 bytes); a
// larger limit leaves room for custom files without trusting any size.
inline constexpr uint64_t kMaxCifar10FileBytes = uint64_t{64} << 20;

// The data set's fixed per-channel normalisation of [0, 1] pixels (R, G, B),
// as commonly used for CIFAR-10 training.
inline constexpr std::array<float, kCifar10Channels> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, kCifar10Channels> kCifar10Stddev = {0.2470f, 0.2435f, 0.2616f};

// "data_batch_1.bin" .. "data_batch_5.bin".
std::vector<std::string> Cifar10TrainFiles();
// "test_batch.bin".
std::string Cifar10TestFile();

// Reads `paths` in order as one split and keeps the first `limit` records
// (0: all). Every file's size is checked before any is read, so a bad file
// is reported even when the limit would not reach it; files past the limit
// are not read.
absl::StatusOr<Dataset> ReadCifar10(const std::vector<std::string>& paths, size_t limit);

// Both splits of the directory `dir`.
absl::StatusOr<TrainTest> LoadCifar10(const std::string& dir, size_t train_limit,
                                      size_t test_limit);
// Both splits from these files (the directory's, as opened by the caller).
absl::StatusOr<TrainTest> LoadCifar10Files(const std::vector<std::string>& train,
                                           const std::string& test, size_t train_limit,
                                           size_t test_limit);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_CIFAR10_H_
