#include "worker/data/loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "worker/data/cifar10.h"
#include "worker/data/csv.h"
#include "worker/data/data_roots.h"
#include "worker/data/idx.h"
#include "worker/data/toy.h"

namespace tagi::data {
namespace {

using tagi::v1::DataSpec;

constexpr int kMnistClasses = 10;
constexpr uint32_t kDefaultToyTrain = 20;
constexpr uint32_t kDefaultToyTest = 100;

// A file the spec reads: the field that names it and the path to use.
struct DataFile {
  std::string field;
  std::string path;
};

std::string OrDefault(const std::string& path, const char* file_name) {
  if (!path.empty()) return path;
  return absl::StrCat(DefaultFashionMnistDir(), "/", file_name);
}

// The six files of a CIFAR-10 directory, or one entry with no path when
// none is given (one "no path given" problem, not six).
std::vector<DataFile> Cifar10FilesOf(const std::string& dir) {
  if (dir.empty()) return {{"data.cifar10_dir", ""}};
  std::vector<std::string> names = Cifar10TrainFiles();
  names.push_back(Cifar10TestFile());
  std::vector<DataFile> files;
  for (const std::string& name : names) {
    files.push_back({"data.cifar10_dir", absl::StrCat(dir, "/", name)});
  }
  return files;
}

// The files of the spec's kind in the order train images, train labels,
// test images, test labels (IDX) or train, test (CSV), with defaults filled.
std::vector<DataFile> FilesOf(const DataSpec& spec) {
  switch (spec.kind()) {
    case DataSpec::FASHION_MNIST:
      return {{"data.train_images",
               OrDefault(spec.train_images(), "train-images-idx3-ubyte.gz")},
              {"data.train_labels",
               OrDefault(spec.train_labels(), "train-labels-idx1-ubyte.gz")},
              {"data.test_images",
               OrDefault(spec.test_images(), "t10k-images-idx3-ubyte.gz")},
              {"data.test_labels",
               OrDefault(spec.test_labels(), "t10k-labels-idx1-ubyte.gz")}};
    case DataSpec::MNIST:
      return {{"data.train_images", spec.train_images()},
              {"data.train_labels", spec.train_labels()},
              {"data.test_images", spec.test_images()},
              {"data.test_labels", spec.test_labels()}};
    case DataSpec::CSV:
      return {{"data.train_csv", spec.train_csv()},
              {"data.test_csv", spec.test_csv()}};
    case DataSpec::CIFAR10:
      return Cifar10FilesOf(spec.cifar10_dir());
    default:
      return {};
  }
}

// Empty when the file is usable, else the problem.
std::string FileProblem(const DataFile& file, const std::string& kind_name) {
  if (file.path.empty()) {
    return absl::StrCat(file.field, ": no path given (required for ", kind_name,
                        ")");
  }
  std::error_code ec;
  if (!std::filesystem::exists(file.path, ec)) {
    return absl::StrCat(file.field, ": file ", file.path, " does not exist");
  }
  if (!std::filesystem::is_regular_file(file.path, ec)) {
    return absl::StrCat(file.field, ": ", file.path, " is not a regular file");
  }
  if (!std::ifstream(file.path, std::ios::binary)) {
    return absl::StrCat(file.field, ": file ", file.path, " is not readable");
  }
  return "";
}

absl::StatusOr<TrainTest> LoadIdxPair(const DataSpec& spec) {
  const std::vector<DataFile> files = FilesOf(spec);
  TrainTest out;
  TAGI_ASSIGN_OR_RETURN(
      out.train, LoadIdxClassification(files[0].path, files[1].path,
                                       kMnistClasses, spec.train_limit()));
  TAGI_ASSIGN_OR_RETURN(
      out.test, LoadIdxClassification(files[2].path, files[3].path,
                                      kMnistClasses, spec.test_limit()));
  return out;
}

absl::StatusOr<TrainTest> LoadCsvPair(const DataSpec& spec) {
  const uint32_t targets =
      spec.has_target_columns() ? spec.target_columns() : 1;
  if (targets == 0) {
    return absl::InvalidArgumentError(
        "data.target_columns: must be at least 1 (unset means 1)");
  }
  TrainTest out;
  TAGI_ASSIGN_OR_RETURN(
      out.train, LoadCsvRegression(spec.train_csv(), targets,
                                   spec.csv_has_header(), spec.train_limit()));
  TAGI_ASSIGN_OR_RETURN(
      out.test, LoadCsvRegression(spec.test_csv(), targets,
                                  spec.csv_has_header(), spec.test_limit()));
  return out;
}

absl::StatusOr<TrainTest> MakeToy(const DataSpec& spec, uint64_t job_seed) {
  size_t n_train =
      spec.has_toy_train_size() ? spec.toy_train_size() : kDefaultToyTrain;
  size_t n_test =
      spec.has_toy_test_size() ? spec.toy_test_size() : kDefaultToyTest;
  if (n_train == 0 || n_test == 0) {
    return absl::InvalidArgumentError(
        "data.toy_train_size and data.toy_test_size must be at least 1");
  }
  if (spec.train_limit() != 0)
    n_train = std::min<size_t>(n_train, spec.train_limit());
  if (spec.test_limit() != 0)
    n_test = std::min<size_t>(n_test, spec.test_limit());
  return MakeCubicToy(job_seed, n_train, n_test);
}

absl::Status CheckShapes(const TrainTest& data) {
  if (data.train.input_dim != data.test.input_dim ||
      data.train.output_dim != data.test.output_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train and test data differ in shape: train has ", data.train.input_dim,
        " inputs and ", data.train.output_dim, " targets per sample, test has ",
        data.test.input_dim, " and ", data.test.output_dim));
  }
  return absl::OkStatus();
}

// The input map of the kind: one scalar fitted on the training images for
// the IDX sets, CIFAR-10's fixed per-channel values, per column otherwise.
Standardizer InputMap(DataSpec::Kind kind, const Dataset& train) {
  switch (kind) {
    case DataSpec::FASHION_MNIST:
    case DataSpec::MNIST:
      return FitScalar(train.inputs);
    case DataSpec::CIFAR10:
      return PerChannel(kCifar10Mean, kCifar10Stddev, kCifar10Side * kCifar10Side);
    default:
      return FitColumns(train.inputs, train.input_dim);
  }
}

LoadedData Standardize(TrainTest data, DataSpec::Kind kind) {
  LoadedData out;
  Dataset& train = data.train;
  Dataset& test = data.test;
  out.input = InputMap(kind, train);
  Apply(out.input, train.inputs, train.input_dim);
  Apply(out.input, test.inputs, test.input_dim);
  if (!train.is_classification()) {
    out.target = FitColumns(train.targets, train.output_dim);
    Apply(out.target, train.targets, train.output_dim);
    Apply(out.target, test.targets, test.output_dim);
  }
  out.data = std::move(data);
  return out;
}

}  // namespace

std::string DefaultFashionMnistDir() {
  return "/usr/share/datasets/fashion-mnist";
}

absl::Status CheckDataFiles(const DataSpec& spec) {
  if (spec.kind() == DataSpec::KIND_UNSPECIFIED ||
      !DataSpec::Kind_IsValid(spec.kind())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.kind: unspecified or unknown (", static_cast<int>(spec.kind()),
        "); expected FASHION_MNIST, MNIST, CSV, TOY_CUBIC or CIFAR10"));
  }
  // A CIFAR-10 directory that is not there is one problem, not six.
  const std::string& dir = spec.cifar10_dir();
  std::error_code ec;
  if (spec.kind() == DataSpec::CIFAR10 && !dir.empty() &&
      !std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.cifar10_dir: ", dir,
                     std::filesystem::exists(dir, ec) ? " is not a directory"
                                                      : " does not exist"));
  }
  std::vector<std::string> problems;
  for (const DataFile& file : FilesOf(spec)) {
    std::string problem = FileProblem(file, DataSpec::Kind_Name(spec.kind()));
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

absl::Status CheckDataRoots(const DataSpec& spec, const std::vector<std::string>& roots) {
  if (spec.kind() == DataSpec::CIFAR10 && !spec.cifar10_dir().empty()) {
    TAGI_RETURN_IF_ERROR(CheckUnderRoots("data.cifar10_dir", spec.cifar10_dir(), roots));
  }
  for (const DataFile& file : FilesOf(spec)) {
    if (!file.path.empty()) TAGI_RETURN_IF_ERROR(CheckUnderRoots(file.field, file.path, roots));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedData> LoadData(const DataSpec& spec, uint64_t job_seed) {
  TAGI_RETURN_IF_ERROR(CheckDataFiles(spec));
  TrainTest data;
  if (spec.kind() == DataSpec::FASHION_MNIST || spec.kind() == DataSpec::MNIST) {
    TAGI_ASSIGN_OR_RETURN(data, LoadIdxPair(spec));
  } else if (spec.kind() == DataSpec::CSV) {
    TAGI_ASSIGN_OR_RETURN(data, LoadCsvPair(spec));
  } else if (spec.kind() == DataSpec::CIFAR10) {
    TAGI_ASSIGN_OR_RETURN(
        data, LoadCifar10(spec.cifar10_dir(), spec.train_limit(), spec.test_limit()));
  } else {
    TAGI_ASSIGN_OR_RETURN(data, MakeToy(spec, job_seed));
  }
  TAGI_RETURN_IF_ERROR(CheckShapes(data));
  if (spec.has_standardize() && !spec.standardize()) {
    return LoadedData{std::move(data), Standardizer{}, Standardizer{}};
  }
  return Standardize(std::move(data), spec.kind());
}

}  // namespace tagi::data
