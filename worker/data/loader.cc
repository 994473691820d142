#include "worker/data/loader.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "common/rng.h"
#include "worker/data/cifar10.h"
#include "worker/data/csv.h"
#include "worker/data/data_file.h"
#include "worker/data/data_roots.h"
#include "worker/data/idx.h"
#include "worker/data/image_folder.h"
#include "worker/data/numpy_data.h"
#include "worker/data/split.h"
#include "worker/data/toy.h"

namespace tagi::data {
namespace {

using tagi::v1::DataSpec;

constexpr int kMnistClasses = 10;
constexpr uint32_t kDefaultToyTrain = 20;
constexpr uint32_t kDefaultToyTest = 100;
// The held-out split's stream of the job seed (worker/trainer.h has
// 101..103).
constexpr uint64_t kHoldoutStream = 104;

// A file the spec reads: the field that names it and the path to use.
struct DataFile {
  std::string field;
  std::string path;
  bool directory = false;
};

// The .npy files of a NUMPY spec without an npz: the training pair, and the
// test pair when either test path is given.
std::vector<DataFile> NumpyFilesOf(const DataSpec& spec) {
  if (!spec.npz().empty()) return {{"data.npz", spec.npz()}};
  std::vector<DataFile> files = {{"data.train_x_npy", spec.train_x_npy()},
                                 {"data.train_y_npy", spec.train_y_npy()}};
  if (!spec.test_x_npy().empty() || !spec.test_y_npy().empty()) {
    files.push_back({"data.test_x_npy", spec.test_x_npy()});
    files.push_back({"data.test_y_npy", spec.test_y_npy()});
  }
  return files;
}

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
    case DataSpec::NUMPY:
      return NumpyFilesOf(spec);
    case DataSpec::IMAGE_FOLDER:
      if (spec.test_dir().empty()) return {{"data.train_dir", spec.train_dir(), true}};
      return {{"data.train_dir", spec.train_dir(), true}, {"data.test_dir", spec.test_dir(), true}};
    case DataSpec::CSV_CLASSIFICATION:
      if (spec.test_csv().empty()) return {{"data.train_csv", spec.train_csv()}};
      return {{"data.train_csv", spec.train_csv()}, {"data.test_csv", spec.test_csv()}};
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
    return absl::StrCat(file.field, ": ", file.directory ? "directory " : "file ", file.path,
                        " does not exist");
  }
  if (file.directory) {
    if (std::filesystem::is_directory(file.path, ec)) return "";
    return absl::StrCat(file.field, ": ", file.path, " is not a directory");
  }
  if (!std::filesystem::is_regular_file(file.path, ec)) {
    return absl::StrCat(file.field, ": ", file.path, " is not a regular file");
  }
  if (!std::ifstream(file.path, std::ios::binary)) {
    return absl::StrCat(file.field, ": file ", file.path, " is not readable");
  }
  return "";
}

// The files of a kind whose readers open by name, opened beneath the
// roots and held (PinnedFile): the readers get the pinned names, and their
// errors the user's paths back.
class Pins {
 public:
  explicit Pins(const LoadOptions& options) : access_{options.roots} {}
  absl::StatusOr<std::string> Pin(const std::string& field, const std::string& path) {
    TAGI_ASSIGN_OR_RETURN(PinnedFile f, PinnedFile::Open(field, path, access_));
    files_.push_back(std::move(f));
    return files_.back().name();
  }
  template <typename T>
  absl::StatusOr<T> Restore(absl::StatusOr<T> r) const {
    if (r.ok()) return r;
    absl::Status st = r.status();
    // Longest names first: /proc/self/fd/12 before /proc/self/fd/1.
    std::vector<const PinnedFile*> order;
    for (const PinnedFile& f : files_) order.push_back(&f);
    std::sort(order.begin(), order.end(), [](const PinnedFile* a, const PinnedFile* b) {
      return a->name().size() > b->name().size();
    });
    for (const PinnedFile* f : order) st = f->Restore(st);
    return st;
  }

 private:
  DataAccess access_;
  std::vector<PinnedFile> files_;
};

absl::StatusOr<TrainTest> LoadIdxPair(const DataSpec& spec, const LoadOptions& options) {
  const std::vector<DataFile> files = FilesOf(spec);
  Pins pins(options);
  std::vector<std::string> names;
  for (const DataFile& f : files) {
    TAGI_ASSIGN_OR_RETURN(std::string name, pins.Pin(f.field, f.path));
    names.push_back(std::move(name));
  }
  TrainTest out;
  TAGI_ASSIGN_OR_RETURN(out.train, pins.Restore(LoadIdxClassification(
                                       names[0], names[1], kMnistClasses, spec.train_limit())));
  TAGI_ASSIGN_OR_RETURN(out.test, pins.Restore(LoadIdxClassification(
                                      names[2], names[3], kMnistClasses, spec.test_limit())));
  return out;
}

absl::StatusOr<TrainTest> LoadCifar10Pinned(const DataSpec& spec, const LoadOptions& options) {
  const std::string& dir = spec.cifar10_dir();
  Pins pins(options);
  std::vector<std::string> train;
  for (const std::string& file : Cifar10TrainFiles()) {
    TAGI_ASSIGN_OR_RETURN(std::string name,
                          pins.Pin("data.cifar10_dir", absl::StrCat(dir, "/", file)));
    train.push_back(std::move(name));
  }
  TAGI_ASSIGN_OR_RETURN(std::string test,
                        pins.Pin("data.cifar10_dir", absl::StrCat(dir, "/", Cifar10TestFile())));
  return pins.Restore(
      LoadCifar10Files(train, test, spec.train_limit(), spec.test_limit()));
}

absl::StatusOr<TrainTest> LoadCsvPair(const DataSpec& spec, const LoadOptions& options) {
  const uint32_t targets =
      spec.has_target_columns() ? spec.target_columns() : 1;
  if (targets == 0) {
    return absl::InvalidArgumentError(
        "data.target_columns: must be at least 1 (unset means 1)");
  }
  Pins pins(options);
  TAGI_ASSIGN_OR_RETURN(const std::string train, pins.Pin("data.train_csv", spec.train_csv()));
  TAGI_ASSIGN_OR_RETURN(const std::string test, pins.Pin("data.test_csv", spec.test_csv()));
  TrainTest out;
  TAGI_ASSIGN_OR_RETURN(out.train, pins.Restore(LoadCsvRegression(
                                       train, targets, spec.csv_has_header(), spec.train_limit())));
  TAGI_ASSIGN_OR_RETURN(out.test, pins.Restore(LoadCsvRegression(
                                      test, targets, spec.csv_has_header(), spec.test_limit())));
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

// The test split of the new kinds: the given one, or held out.
absl::StatusOr<TrainTest> WithTest(Dataset train, std::optional<Dataset> test,
                                   const DataSpec& spec, uint64_t job_seed) {
  TrainTest out;
  if (test && spec.holdout_fraction() != 0.0f) {
    return absl::InvalidArgumentError(
        "data.holdout_fraction: the data has a test set already (the npz holds x_test and "
        "y_test); give one or the other");
  }
  if (test) {
    out = {std::move(train), *std::move(test)};
  } else {
    TAGI_ASSIGN_OR_RETURN(out, HoldOut(train, spec.holdout_fraction(),
                                       DeriveSeed(job_seed, kHoldoutStream)));
  }
  out.train = TakeEvenly(std::move(out.train), spec.train_limit());
  out.test = TakeEvenly(std::move(out.test), spec.test_limit());
  return out;
}

absl::StatusOr<TrainTest> LoadNumpyKind(const DataSpec& spec, uint64_t job_seed,
                                        const LoadOptions& options) {
  TAGI_ASSIGN_OR_RETURN(NumpySplits s,
                        LoadNumpy(spec, DataAccess{options.roots}, options.num_classes));
  return WithTest(std::move(s.train), std::move(s.test), spec, job_seed);
}

absl::StatusOr<TrainTest> LoadImageFolderKind(const DataSpec& spec, uint64_t job_seed,
                                              const LoadOptions& options) {
  if ((options.channels != 1 && options.channels != 3) || options.height == 0 ||
      options.width == 0) {
    return absl::InvalidArgumentError(
        "input: IMAGE_FOLDER data needs the job's input shape with 1 (grey) or 3 (RGB) "
        "channels");
  }
  const ImageShape shape{options.channels, options.height, options.width};
  const DataAccess access{options.roots};
  TAGI_ASSIGN_OR_RETURN(
      Dataset train, LoadImageFolder("data.train_dir", spec.train_dir(), access, shape,
                                     spec.image_fit(), {}));
  std::optional<Dataset> test;
  if (!spec.test_dir().empty()) {
    TAGI_ASSIGN_OR_RETURN(test, LoadImageFolder("data.test_dir", spec.test_dir(), access, shape,
                                                spec.image_fit(), train.class_names));
  }
  return WithTest(std::move(train), std::move(test), spec, job_seed);
}

absl::StatusOr<Dataset> LoadCsvLabelled(const std::string& field, const std::string& path,
                                        const DataSpec& spec, const LoadOptions& options) {
  if (options.num_classes < 1) {
    return absl::InvalidArgumentError(
        "head: CSV_CLASSIFICATION data needs a classification head");
  }
  TAGI_ASSIGN_OR_RETURN(const MappedFile file,
                        MapDataFile(field, path, DataAccess{options.roots}, kMaxCsvBytes));
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()),
                              file.bytes().size());
  CsvLabel label{spec.label_column(), std::nullopt};
  if (spec.has_label_column_index()) label.index = spec.label_column_index();
  return ParseCsvClassification(text, path, label, spec.csv_has_header(), options.num_classes);
}

absl::StatusOr<TrainTest> LoadCsvClassificationKind(const DataSpec& spec, uint64_t job_seed,
                                                    const LoadOptions& options) {
  TAGI_ASSIGN_OR_RETURN(Dataset train,
                        LoadCsvLabelled("data.train_csv", spec.train_csv(), spec, options));
  std::optional<Dataset> test;
  if (!spec.test_csv().empty()) {
    TAGI_ASSIGN_OR_RETURN(test, LoadCsvLabelled("data.test_csv", spec.test_csv(), spec, options));
  }
  return WithTest(std::move(train), std::move(test), spec, job_seed);
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
      // Images (NUMPY image arrays, IMAGE_FOLDER): one scalar, as for IDX.
      if (train.channels > 0) return FitScalar(train.inputs);
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
        "); expected FASHION_MNIST, MNIST, CSV, TOY_CUBIC, CIFAR10, NUMPY, IMAGE_FOLDER or "
        "CSV_CLASSIFICATION"));
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

LoadOptions LoadOptionsFor(const tagi::v1::JobSpec& job, std::vector<std::string> roots) {
  LoadOptions options;
  options.roots = std::move(roots);
  if (job.head().has_classification()) {
    options.num_classes = static_cast<int>(job.head().classification().num_classes());
  }
  if (job.has_input()) {
    options.channels = job.input().channels();
    options.height = job.input().height();
    options.width = job.input().width();
  }
  return options;
}

absl::StatusOr<LoadedData> LoadData(const DataSpec& spec, uint64_t job_seed,
                                    const LoadOptions& options) {
  TAGI_RETURN_IF_ERROR(CheckDataFiles(spec));
  TrainTest data;
  if (spec.kind() == DataSpec::NUMPY) {
    TAGI_ASSIGN_OR_RETURN(data, LoadNumpyKind(spec, job_seed, options));
  } else if (spec.kind() == DataSpec::IMAGE_FOLDER) {
    TAGI_ASSIGN_OR_RETURN(data, LoadImageFolderKind(spec, job_seed, options));
  } else if (spec.kind() == DataSpec::CSV_CLASSIFICATION) {
    TAGI_ASSIGN_OR_RETURN(data, LoadCsvClassificationKind(spec, job_seed, options));
  } else if (spec.kind() == DataSpec::FASHION_MNIST || spec.kind() == DataSpec::MNIST) {
    TAGI_ASSIGN_OR_RETURN(data, LoadIdxPair(spec, options));
  } else if (spec.kind() == DataSpec::CSV) {
    TAGI_ASSIGN_OR_RETURN(data, LoadCsvPair(spec, options));
  } else if (spec.kind() == DataSpec::CIFAR10) {
    TAGI_ASSIGN_OR_RETURN(data, LoadCifar10Pinned(spec, options));
  } else {
    TAGI_ASSIGN_OR_RETURN(data, MakeToy(spec, job_seed));
  }
  TAGI_RETURN_IF_ERROR(CheckShapes(data));
  const uint64_t fingerprint =
      Mix64(DatasetFingerprint(data.train) ^ Mix64(DatasetFingerprint(data.test)));
  LoadedData out;
  if (spec.has_standardize() && !spec.standardize()) {
    out = LoadedData{std::move(data), Standardizer{}, Standardizer{}};
  } else {
    out = Standardize(std::move(data), spec.kind());
  }
  out.fingerprint = fingerprint;
  return out;
}

}  // namespace tagi::data
