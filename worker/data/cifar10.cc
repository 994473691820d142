#include "worker/data/cifar10.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace tagi::data {
namespace {

constexpr int kTrainFiles = 5;

// The number of records in `path`, judged from its size alone, or the
// problem (empty when there is none).
std::string RecordCount(const std::string& path, size_t& records) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return absl::StrCat(path, ": file does not exist");
  if (!std::filesystem::is_regular_file(st)) return absl::StrCat(path, ": not a regular file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::StrCat(path, ": cannot read its size: ", ec.message());
  if (size == 0) {
    return absl::StrFormat(
        "%s: empty file; expected one or more %d-byte records (a label byte and %d pixel bytes "
        "each)",
        path, kCifar10RecordBytes, kCifar10Pixels);
  }
  if (size > kMaxCifar10FileBytes) {
    return absl::StrFormat(
        "%s: %d bytes; a CIFAR-10 file may have at most %d (a batch of 10000 records has %d)", path,
        size, kMaxCifar10FileBytes, 10000 * kCifar10RecordBytes);
  }
  if (size % kCifar10RecordBytes != 0) {
    return absl::StrFormat(
        "%s: %d bytes is not a whole number of %d-byte records (%d whole records and %d bytes "
        "over)",
        path, size, kCifar10RecordBytes, size / kCifar10RecordBytes, size % kCifar10RecordBytes);
  }
  records = size / kCifar10RecordBytes;
  return "";
}

// Record counts of every file, or one InvalidArgument naming every problem.
absl::StatusOr<std::vector<size_t>> RecordCounts(const std::vector<std::string>& paths) {
  std::vector<size_t> counts(paths.size(), 0);
  std::vector<std::string> problems;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string problem = RecordCount(paths[i], counts[i]);
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  return counts;
}

// Reads the first `count` records of `path` into `out` from sample `first`
// on (out is already sized).
absl::Status ReadRecords(const std::string& path, size_t count, size_t first, Dataset& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::array<uint8_t, kCifar10RecordBytes> record{};
  for (size_t r = 0; r < count; ++r) {
    in.read(reinterpret_cast<char*>(record.data()), record.size());
    if (static_cast<size_t>(in.gcount()) != record.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: ended inside record %d (its size said %d records; did it change while being "
          "read?)",
          path, r, count));
    }
    if (record[0] >= kCifar10Classes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: record %d (byte offset %d) has a label above 9; CIFAR-10 labels "
                          "are 0..9",
                          path, r, r * kCifar10RecordBytes));
    }
    const size_t sample = first + r;
    out.labels[sample] = record[0];
    float* row = out.inputs.data() + sample * kCifar10Pixels;
    for (size_t i = 0; i < kCifar10Pixels; ++i) {
      row[i] = static_cast<float>(record[1 + i]) / 255.0f;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> Cifar10TrainFiles() {
  std::vector<std::string> names;
  for (int i = 1; i <= kTrainFiles; ++i) names.push_back(absl::StrCat("data_batch_", i, ".bin"));
  return names;
}

std::string Cifar10TestFile() { return "test_batch.bin"; }

absl::StatusOr<Dataset> ReadCifar10(const std::vector<std::string>& paths, size_t limit) {
  if (paths.empty()) return absl::InvalidArgumentError("CIFAR-10: no files to read");
  TAGI_ASSIGN_OR_RETURN(const std::vector<size_t> counts, RecordCounts(paths));
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t n = limit == 0 ? total : std::min(total, limit);

  Dataset out;
  out.num_samples = n;
  out.input_dim = kCifar10Pixels;
  out.num_classes = kCifar10Classes;
  out.labels.resize(n);
  out.inputs.resize(n * kCifar10Pixels);
  size_t done = 0;
  for (size_t f = 0; f < paths.size() && done < n; ++f) {
    const size_t take = std::min(counts[f], n - done);
    TAGI_RETURN_IF_ERROR(ReadRecords(paths[f], take, done, out));
    done += take;
  }
  return out;
}

absl::StatusOr<TrainTest> LoadCifar10(const std::string& dir, size_t train_limit,
                                      size_t test_limit) {
  std::vector<std::string> train;
  for (const std::string& name : Cifar10TrainFiles()) train.push_back(absl::StrCat(dir, "/", name));
  return LoadCifar10Files(train, absl::StrCat(dir, "/", Cifar10TestFile()), train_limit,
                          test_limit);
}

absl::StatusOr<TrainTest> LoadCifar10Files(const std::vector<std::string>& train,
                                           const std::string& test, size_t train_limit,
                                           size_t test_limit) {
  // Every problem of both splits in one answer, before anything is read.
  std::vector<std::string> all = train;
  all.push_back(test);
  TAGI_RETURN_IF_ERROR(RecordCounts(all).status());

  TrainTest out;
  TAGI_ASSIGN_OR_RETURN(out.train, ReadCifar10(train, train_limit));
  TAGI_ASSIGN_OR_RETURN(out.test, ReadCifar10({test}, test_limit));
  return out;
}

}  // namespace tagi::data
