#include "common/job_spec.h"

#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "spec/hsm_tree.h"
#include "common/json_depth.h"
#include "spec/network_proto.h"
#include "spec/plan.h"

namespace tagi {
namespace {

using tagi::v1::DataSpec;
using tagi::v1::JobSpec;
using tagi::v1::Layer;

constexpr int kImageInputWidth = 28 * 28;
constexpr int kImageClasses = 10;
constexpr spec::Shape kCifar10Shape = {3, 32, 32};

bool IsImageData(DataSpec::Kind kind) {
  return kind == DataSpec::FASHION_MNIST || kind == DataSpec::MNIST || kind == DataSpec::CIFAR10;
}

// The input shape of a job without `input`, when the data kind fixes it:
// 3x32x32 for CIFAR10, flat and as wide as the data for the other kinds
// that know their width.
std::optional<spec::Shape> DefaultInputShape(const DataSpec& data) {
  if (data.kind() == DataSpec::CIFAR10) return kCifar10Shape;
  const int width = ExpectedInputWidth(data);
  if (width > 0) return spec::Shape{static_cast<uint32_t>(width), 1, 1};
  return std::nullopt;
}

bool FinitePositive(float v) { return std::isfinite(v) && v > 0.0f; }

// Collects every problem so that one answer names them all.
// The proto field names of the job file's messages that differ from their
// JSON names (snake_case -> camelCase), collected from the descriptors.
void CollectJsonNames(const google::protobuf::Descriptor* d,
                      absl::flat_hash_map<std::string, std::string>& names,
                      absl::flat_hash_set<const google::protobuf::Descriptor*>& seen) {
  if (!seen.insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->name() != f->json_name()) names.emplace(f->name(), f->json_name());
    if (f->message_type() != nullptr) CollectJsonNames(f->message_type(), names, seen);
  }
}

bool IdentifierChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// `text` with the job file's field names as the file writes them
// ("layers[2].in_features" -> "layers[2].inFeatures"). Only whole words
// that are field names of the job's messages change, and never inside a
// path ("/data/train_images.gz" keeps its name: a word after or before a
// '/' is left alone).
std::string JsonFieldNamesOf(absl::string_view text) {
  absl::flat_hash_map<std::string, std::string> names;
  absl::flat_hash_set<const google::protobuf::Descriptor*> seen;
  CollectJsonNames(JobSpec::descriptor(), names, seen);
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (!IdentifierChar(text[i])) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && IdentifierChar(text[j])) ++j;
    const std::string word(text.substr(i, j - i));
    const bool in_path = (i > 0 && text[i - 1] == '/') || (j < text.size() && text[j] == '/');
    auto it = names.find(word);
    out += (it != names.end() && !in_path) ? it->second : word;
    i = j;
  }
  return out;
}

class Problems {
 public:
  void AddRaw(std::string problem) { list_.push_back(std::move(problem)); }
  template <typename... Args>
  void Add(const absl::FormatSpec<Args...>& format, const Args&... args) {
    list_.push_back(absl::StrFormat(format, args...));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    // In the job file's own words: its fields by their JSON names.
    return absl::InvalidArgumentError(
        JsonFieldNamesOf(absl::StrCat("invalid job: ", absl::StrJoin(list_, "; "))));
  }

 private:
  std::vector<std::string> list_;
};

// The network of the job, its problems added to `p`; nullopt when it has any.
std::optional<spec::Architecture> BuildArchitecture(const JobSpec& job, Problems& p) {
  std::vector<std::string> problems;
  spec::Architecture arch;
  arch.layers = spec::LayersFromProto(job.layers(), &problems);
  const int data_width = ExpectedInputWidth(job.data());
  if (job.has_input()) {
    arch.input = {job.input().channels(), job.input().height(), job.input().width()};
    if (data_width > 0 && arch.input.size() != static_cast<uint64_t>(data_width)) {
      problems.push_back(absl::StrFormat(
          "input: shape %s has %d units per sample but the %s data has %d", arch.input.ToString(),
          arch.input.size(), DataSpec::Kind_Name(job.data().kind()), data_width));
    }
  } else if (const std::optional<spec::Shape> shape = DefaultInputShape(job.data())) {
    arch.input = *shape;
  } else if (!arch.layers.empty() && arch.layers[0].kind == Layer::LINEAR &&
             arch.layers[0].in > 0) {
    arch.input = {arch.layers[0].in, 1, 1};
  } else if (!arch.layers.empty()) {
    problems.push_back(
        "input: missing; only the data files know their width and the first layer is not "
        "LINEAR, so give input {\"channels\": C, \"height\": H, \"width\": W}");
  }
  // A missing head is CheckHead's to report; its width rule needs one.
  arch.head = {spec::HeadKind::kRegression, 0};
  if (job.has_head() && (job.head().has_classification() || job.head().has_regression())) {
    absl::StatusOr<spec::HeadSpec> head = spec::HeadFromProto(job.head());
    if (head.ok()) {
      arch.head = *head;
    } else {
      problems.push_back(std::string(head.status().message()));
    }
  }
  if (problems.empty()) spec::CheckArchitecture(arch, &problems);
  if (problems.empty() && job.head().has_regression()) {
    const int out = ExpectedOutputWidth(job);
    if (out > 0 && arch.output_width() != static_cast<uint32_t>(out)) {
      problems.push_back(absl::StrFormat(
          "layers: the last layer gives %d outputs but the regression head needs %d (%s)",
          arch.output_width(), out,
          arch.head.heteroscedastic ? "a mean and a noise unit per target" : "one per target"));
    }
  }
  for (std::string& problem : problems) p.AddRaw(std::move(problem));
  if (!problems.empty()) return std::nullopt;
  return arch;
}

// The plan's arenas for the job's batch (a pure layout: nothing is allocated).
void CheckModelMemory(const spec::Architecture& arch, uint32_t batch, Problems& p) {
  const auto plan = spec::MakePlan(arch, {batch, 1});
  if (!plan.ok()) return;  // BuildArchitecture reported why
  const uint64_t floats = 4 * uint64_t{plan->num_parameters} + 2 * uint64_t{plan->num_state} +
                          plan->derived_floats + plan->batch_floats + plan->workspace_floats;
  if (floats * sizeof(float) > kMaxModelBytes) {
    p.Add("layers: the model needs %d MiB per rank at batch_size %d (parameters, deltas and "
          "the batch's units and innovations); at most %d MiB are allowed",
          floats * sizeof(float) >> 20, batch, kMaxModelBytes >> 20);
  }
}

// Decodes the UTF-8 sequence at text[i]; 0 (and cp untouched) when it is
// not well formed (overlong, surrogate, past U+10FFFF, truncated).
size_t Utf8Sequence(const std::string& text, size_t i, uint32_t& cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  size_t n = 0;
  uint32_t v = 0;
  uint32_t min = 0;
  if (b0 < 0x80) return cp = b0, 1;
  if ((b0 & 0xE0) == 0xC0) n = 2, v = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) n = 3, v = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) n = 4, v = b0 & 0x07, min = 0x10000;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (byte(i + k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return n;
}

// Characters that would let a job's text act on a terminal or hide what it
// says: C0 controls, DEL, C1 controls, bidirectional overrides and isolates.
bool ForbiddenInText(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void CheckText(const JobSpec& spec, Problems& p) {
  const DataSpec& d = spec.data();
  if (auto st = CheckJobText("name", spec.name(), kMaxJobNameBytes); !st.ok()) {
    p.AddRaw(std::string(st.message()));
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"data.train_images", &d.train_images()},
        {"data.train_labels", &d.train_labels()},
        {"data.test_images", &d.test_images()},
        {"data.test_labels", &d.test_labels()},
        {"data.train_csv", &d.train_csv()},
        {"data.test_csv", &d.test_csv()},
        {"data.cifar10_dir", &d.cifar10_dir()},
        {"data.npz", &d.npz()},
        {"data.train_x_npy", &d.train_x_npy()},
        {"data.train_y_npy", &d.train_y_npy()},
        {"data.test_x_npy", &d.test_x_npy()},
        {"data.test_y_npy", &d.test_y_npy()},
        {"data.train_dir", &d.train_dir()},
        {"data.test_dir", &d.test_dir()},
        {"data.label_column", &d.label_column()},
        {"init_from", &spec.init_from()}}) {
    if (auto st = CheckJobText(field, *value, kMaxDataPathBytes); !st.ok()) {
      p.AddRaw(std::string(st.message()));
    }
  }
}

// What the layers ask of the batch (every kind runs on the CPU and on
// CUDA alike).
void CheckLayerNeeds(const spec::Architecture& arch, const JobSpec& spec, Problems& p) {
  std::string path;
  const uint32_t min_batch = spec::MinTrainBatch(arch, &path);
  if (spec.batch_size() >= 1 && spec.batch_size() < min_batch) {
    p.Add("batch_size: %d; %s normalises single values over the batch, which needs a batch of "
          "at least %d (one sample has no variance)", spec.batch_size(), path, min_batch);
  }
}

void CheckHead(const JobSpec& spec, Problems& p) {
  const DataSpec::Kind data = spec.data().kind();
  const bool image_data = IsImageData(data);
  if (spec.head().has_classification()) {
    const uint32_t k = spec.head().classification().num_classes();
    // Its range is the model spec's rule (BuildArchitecture).
    if (image_data && k != kImageClasses && k >= 2 &&
        k <= static_cast<uint32_t>(HsmTree::kMaxClasses)) {
      p.Add("head.classification.num_classes: %d; the %s data set has %d classes",
            k, DataSpec::Kind_Name(data), kImageClasses);
    }
    if (data == DataSpec::CSV || data == DataSpec::TOY_CUBIC) {
      p.Add("head: classification needs labelled data (FASHION_MNIST, MNIST, CIFAR10, NUMPY, "
            "IMAGE_FOLDER or CSV_CLASSIFICATION), not %s", DataSpec::Kind_Name(data));
    }
  } else if (spec.head().has_regression()) {
    if (image_data || data == DataSpec::IMAGE_FOLDER || data == DataSpec::CSV_CLASSIFICATION) {
      p.Add("head: regression needs CSV, TOY_CUBIC or NUMPY data, not %s",
            DataSpec::Kind_Name(data));
    }
  } else {
    p.Add("head: missing; expected {\"classification\": {\"numClasses\": K}} "
          "or {\"regression\": {}}");
  }
}

void CheckNumpyData(const DataSpec& data, Problems& p) {
  const bool npy = !data.train_x_npy().empty() || !data.train_y_npy().empty() ||
                   !data.test_x_npy().empty() || !data.test_y_npy().empty();
  if (!data.npz().empty() && npy) {
    p.Add("data.npz: give either npz or the .npy paths, not both");
  } else if (data.npz().empty()) {
    if (data.train_x_npy().empty() || data.train_y_npy().empty()) {
      p.Add("data.train_x_npy / data.train_y_npy: missing; NUMPY needs npz or both training "
            ".npy files");
    }
    if (data.test_x_npy().empty() != data.test_y_npy().empty()) {
      p.Add("data.test_x_npy / data.test_y_npy: give both or neither");
    }
  }
  if (!DataSpec::ImageLayout_IsValid(data.layout())) p.Add("data.layout: unknown");
}

// The kinds that may lack a test set, and whether this spec names one (an
// npz may hold one: only the file knows).
bool MayHoldOut(const DataSpec& data) {
  return data.kind() == DataSpec::NUMPY || data.kind() == DataSpec::IMAGE_FOLDER ||
         data.kind() == DataSpec::CSV_CLASSIFICATION;
}
bool NamesTestSet(const DataSpec& data) {
  switch (data.kind()) {
    case DataSpec::NUMPY: return !data.test_x_npy().empty();
    case DataSpec::IMAGE_FOLDER: return !data.test_dir().empty();
    case DataSpec::CSV_CLASSIFICATION: return !data.test_csv().empty();
    default: return true;
  }
}

void CheckHoldout(const DataSpec& data, Problems& p) {
  const float f = data.holdout_fraction();
  if (f == 0.0f) {
    if (MayHoldOut(data) && data.npz().empty() && !NamesTestSet(data)) {
      p.Add("data.holdout_fraction: the job names no test set; give one, or a fraction in "
            "(0, 1) of the training samples to hold out");
    }
    return;
  }
  if (!MayHoldOut(data)) {
    p.Add("data.holdout_fraction: only NUMPY, IMAGE_FOLDER and CSV_CLASSIFICATION data hold "
          "samples out, not %s", DataSpec::Kind_Name(data.kind()));
  } else if (!(f > 0.0f && f < 1.0f)) {
    p.Add("data.holdout_fraction: %g; expected a fraction in (0, 1)", f);
  } else if (NamesTestSet(data)) {
    p.Add("data.holdout_fraction: the job names a test set already; give one or the other");
  }
}

// IMAGE_FOLDER images are fitted to the job's input shape.
void CheckImageFolderInput(const JobSpec& job, Problems& p) {
  if (job.data().kind() != DataSpec::IMAGE_FOLDER) return;
  if (!job.has_input()) {
    p.Add("input: missing; IMAGE_FOLDER images are fitted to it, so give input "
          "{\"channels\": 1 or 3, \"height\": H, \"width\": W}");
  } else if (job.input().channels() != 1 && job.input().channels() != 3) {
    p.Add("input.channels: %d; IMAGE_FOLDER images are grey (1) or RGB (3)",
          job.input().channels());
  }
}

void CheckData(const DataSpec& data, Problems& p) {
  switch (data.kind()) {
    case DataSpec::FASHION_MNIST:
      break;
    case DataSpec::MNIST:
      for (const auto& [field, value] :
           {std::pair<const char*, const std::string*>{"train_images", &data.train_images()},
            {"train_labels", &data.train_labels()},
            {"test_images", &data.test_images()},
            {"test_labels", &data.test_labels()}}) {
        if (value->empty()) p.Add("data.%s: missing; MNIST needs its IDX file paths", field);
      }
      break;
    case DataSpec::CSV:
      if (data.train_csv().empty()) p.Add("data.train_csv: missing; CSV data needs it");
      if (data.test_csv().empty()) p.Add("data.test_csv: missing; CSV data needs it");
      // The last LINEAR has one output per target column.
      if (data.has_target_columns() &&
          (data.target_columns() < 1 || data.target_columns() > kMaxLayerWidth)) {
        p.Add("data.target_columns: %d; expected 1..%d", data.target_columns(), kMaxLayerWidth);
      }
      break;
    case DataSpec::TOY_CUBIC:
      // Generated in every worker's memory: bounded like a file's rows.
      if (data.has_toy_train_size() &&
          (data.toy_train_size() < 1 || data.toy_train_size() > kMaxToySamples)) {
        p.Add("data.toy_train_size: %d; expected 1..%d", data.toy_train_size(), kMaxToySamples);
      }
      if (data.has_toy_test_size() &&
          (data.toy_test_size() < 1 || data.toy_test_size() > kMaxToySamples)) {
        p.Add("data.toy_test_size: %d; expected 1..%d", data.toy_test_size(), kMaxToySamples);
      }
      break;
    case DataSpec::CIFAR10:
      if (data.cifar10_dir().empty()) {
        p.Add("data.cifar10_dir: missing; CIFAR10 needs the directory holding "
              "data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
      }
      break;
    case DataSpec::NUMPY:
      CheckNumpyData(data, p);
      break;
    case DataSpec::IMAGE_FOLDER:
      if (data.train_dir().empty()) {
        p.Add("data.train_dir: missing; IMAGE_FOLDER needs the folder with one sub-folder per "
              "class");
      }
      if (!DataSpec::ImageFit_IsValid(data.image_fit())) p.Add("data.image_fit: unknown");
      break;
    case DataSpec::CSV_CLASSIFICATION:
      if (data.train_csv().empty()) p.Add("data.train_csv: missing; CSV_CLASSIFICATION needs it");
      if (data.label_column().empty() == !data.has_label_column_index()) {
        p.Add("data.label_column / data.label_column_index: give exactly one (the label "
              "column by header name, or by 0-based index)");
      }
      break;
    default:
      p.Add("data.kind: missing or unknown; expected one of FASHION_MNIST, "
            "MNIST, CSV, TOY_CUBIC, CIFAR10, NUMPY, IMAGE_FOLDER, CSV_CLASSIFICATION");
  }
  CheckHoldout(data, p);
}

// Crops and flips need image data laid out as an image.
void CheckAugment(const JobSpec& job, Problems& p) {
  const tagi::v1::Augmentation& a = job.data().augment();
  const uint32_t pad = a.random_crop_padding();
  if (pad == 0 && !a.horizontal_flip()) return;
  const DataSpec::Kind kind = job.data().kind();
  if (!IsImageData(kind) && kind != DataSpec::NUMPY && kind != DataSpec::IMAGE_FOLDER) {
    p.Add("data.augment: crops and flips are for image data (FASHION_MNIST, MNIST, CIFAR10, "
          "NUMPY or IMAGE_FOLDER), not %s", DataSpec::Kind_Name(kind));
    return;
  }
  if (pad > kMaxCropPadding) {
    p.Add("data.augment.random_crop_padding: %d; expected at most %d", pad, kMaxCropPadding);
  }
  std::optional<spec::Shape> shape = DefaultInputShape(job.data());
  if (job.has_input()) {
    shape = spec::Shape{job.input().channels(), job.input().height(), job.input().width()};
  }
  if (!shape) {
    // NUMPY and IMAGE_FOLDER: only the job says the data is an image.
    p.Add("data.augment: crops and flips need the image's shape; give input {\"channels\": C, "
          "\"height\": H, \"width\": W}");
    return;
  }
  if (shape->h <= 1 || shape->w <= 1) {
    p.Add("data.augment: crops and flips need an image input (height and width > 1), but the "
          "input is %s; give input {\"channels\": C, \"height\": H, \"width\": W}",
          shape->ToString());
  } else if (pad > shape->h || pad > shape->w) {
    p.Add("data.augment.random_crop_padding: %d; expected at most the image's height and width "
          "(input %s)", pad, shape->ToString());
  }
}

void CheckTraining(const JobSpec& spec, Problems& p) {
  if (spec.batch_size() < 1 || spec.batch_size() > kMaxBatchSize) {
    p.Add("batch_size: %d; expected 1..%d", spec.batch_size(), kMaxBatchSize);
  }
  if (spec.epochs() < 1 || spec.epochs() > kMaxEpochs) {
    p.Add("epochs: %d; expected 1..%d", spec.epochs(), kMaxEpochs);
  }
  const auto& noise = spec.noise();
  // A heteroscedastic head learns its noise: the schedule may be left out
  // (all zero) and is not used; one that is given must still make sense.
  const bool learned_noise = spec.head().regression().heteroscedastic() &&
                             noise.sigma_v() == 0.0f && !noise.has_decay() &&
                             noise.sigma_v_min() == 0.0f;
  if (learned_noise) {
    // nothing to check
  } else if (!FinitePositive(noise.sigma_v())) {
    p.Add("noise.sigma_v: %g; expected a finite value > 0", noise.sigma_v());
  }
  if (noise.has_decay() && !(noise.decay() > 0.0f && noise.decay() <= 1.0f)) {
    p.Add("noise.decay: %g; expected a value in (0, 1]", noise.decay());
  }
  if (!(noise.sigma_v_min() >= 0.0f) || !std::isfinite(noise.sigma_v_min()) ||
      noise.sigma_v_min() > noise.sigma_v()) {
    p.Add("noise.sigma_v_min: %g; expected 0 <= sigma_v_min <= sigma_v", noise.sigma_v_min());
  }
  const auto& init = spec.init();
  if (init.has_gain_weight() && !FinitePositive(init.gain_weight())) {
    p.Add("init.gain_weight: %g; expected a finite value > 0", init.gain_weight());
  }
  if (init.has_gain_bias() && !FinitePositive(init.gain_bias())) {
    p.Add("init.gain_bias: %g; expected a finite value > 0", init.gain_bias());
  }
  if (!tagi::v1::Init::Method_IsValid(init.method())) p.Add("init.method: unknown");
  if (!JobSpec::Reduction_IsValid(spec.reduction())) {
    p.Add("reduction: %d is unknown; expected SUM or AVERAGE", static_cast<int>(spec.reduction()));
  }
  if (!JobSpec::Backend_IsValid(spec.backend())) {
    p.Add("backend: %d is unknown; expected GLOO, NCCL or TCP_RING (or unset for automatic)",
          static_cast<int>(spec.backend()));
  }
  if (spec.world_size() > kMaxWorldSize) {
    p.Add("world_size: %d; expected 0 (the coordinator's --world) or 1..%d",
          spec.world_size(), kMaxWorldSize);
  }
  if (spec.min_world_size() > kMaxWorldSize || spec.max_world_size() > kMaxWorldSize) {
    p.Add("min_world_size %d, max_world_size %d: expected at most %d", spec.min_world_size(),
          spec.max_world_size(), kMaxWorldSize);
  } else if (IsElastic(spec) && spec.world_size() > 0) {
    p.Add("world_size: %d; an elastic job (min_world_size %d, max_world_size %d) sets its "
          "bounds instead: expected 0",
          spec.world_size(), spec.min_world_size(), spec.max_world_size());
  } else if (spec.max_world_size() > 0 && spec.min_world_size() > spec.max_world_size()) {
    p.Add("min_world_size: %d exceeds max_world_size %d", spec.min_world_size(),
          spec.max_world_size());
  }
  auto device = ParseDevice(spec.device());
  if (!device.ok()) {
    p.Add("device: %s", device.status().message());
  } else if (*device < 0 && spec.backend() == JobSpec::NCCL) {
    p.Add("backend: NCCL needs a cuda device, but device is \"%s\"", spec.device());
  }
  const JobSpec::WirePrecision wire = spec.wire_precision();
  if (!JobSpec::WirePrecision_IsValid(wire)) {
    p.Add("wire_precision: %d is unknown; expected FP32, BF16 or FP16", static_cast<int>(wire));
  } else if ((wire == JobSpec::BF16 || wire == JobSpec::FP16) && spec.backend() == JobSpec::GLOO) {
    p.Add("wire_precision: %s needs the TCP_RING or the NCCL backend (the defaults on a cpu and "
          "a cuda device); backend GLOO reduces in FP32",
          JobSpec::WirePrecision_Name(wire));
  }
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpecJson(const std::string& json) {
  if (json.size() > kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "job spec is %d bytes; at most %d are accepted", json.size(), kMaxJobSpecBytes));
  }
  if (auto st = CheckJsonDepth(json); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", st.message()));
  }
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        JsonFieldNamesOf(absl::StrCat("job spec is not valid JobSpec JSON: ",
                                      status.message().as_string())));
  }
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  auto text = ReadFile(path, kMaxJobSpecBytes);
  if (!text.ok()) return text.status();
  auto spec = ParseJobSpecJson(*text);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

std::string JobSpecToJson(const JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = false;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

uint64_t BucketBytes(const JobSpec& spec) {
  return uint64_t{spec.has_bucket_kib() ? spec.bucket_kib() : kDefaultBucketKib} << 10;
}

uint64_t DeltaArenaKib(uint64_t num_parameters) {
  return (num_parameters * 2 * sizeof(float) + 1023) / 1024;
}

std::string JobFileFieldNames(absl::string_view text) { return JsonFieldNamesOf(text); }

absl::Status ValidateJobSpec(const JobSpec& spec) {
  Problems p;
  const std::optional<spec::Architecture> arch = BuildArchitecture(spec, p);
  if (spec.has_bucket_kib()) {
    const uint64_t most = arch ? std::max<uint64_t>(DeltaArenaKib(arch->num_parameters()), 1) : 0;
    if (spec.bucket_kib() == 0) {
      p.Add("bucket_kib: 0; expected 1..%d (KiB of deltas per all-reduce bucket; leave it unset "
            "for %d)",
            most, kDefaultBucketKib);
    } else if (arch && spec.bucket_kib() > most) {
      p.Add("bucket_kib: %d is larger than the model's delta arena (%d KiB for %d parameters); "
            "%d puts the whole step in one all-reduce",
            spec.bucket_kib(), most, arch->num_parameters(), most);
    }
  }
  if (arch && spec.batch_size() >= 1 && spec.batch_size() <= kMaxBatchSize) {
    CheckModelMemory(*arch, spec.batch_size(), p);
  }
  if (arch) {
    if (auto st = CheckModelUploadable(spec, kMaxUploadBytes); !st.ok()) {
      p.AddRaw(std::string(st.message()));
    }
  }
  CheckText(spec, p);
  if (arch) CheckLayerNeeds(*arch, spec, p);
  CheckHead(spec, p);
  CheckData(spec.data(), p);
  CheckImageFolderInput(spec, p);
  CheckAugment(spec, p);
  CheckTraining(spec, p);
  return p.ToStatus();
}

absl::Status CheckJobText(const std::string& field, const std::string& text, size_t max_bytes) {
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes; at most %d are allowed", field, text.size(), max_bytes));
  }
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8Sequence(text, i, cp);
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: not valid UTF-8 at byte %d", field, i));
    }
    if (ForbiddenInText(cp)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: holds the control character U+%04X at byte %d; control characters and "
          "bidirectional overrides are not allowed",
          field, cp, i));
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::Status CheckModelUploadable(const JobSpec& job, uint64_t max_upload_bytes) {
  Problems ignored;
  const std::optional<spec::Architecture> arch = BuildArchitecture(job, ignored);
  if (!arch) return absl::OkStatus();
  const auto plan = spec::MakePlan(*arch, {1, 1});
  if (!plan.ok()) return absl::OkStatus();
  const uint64_t params = plan->num_parameters;
  const uint64_t state = plan->num_state;
  const uint64_t needed = 8 * params + 4 * state + kUploadOverheadBytes;
  if (needed <= max_upload_bytes) return absl::OkStatus();
  const uint64_t room = max_upload_bytes > kUploadOverheadBytes + 4 * state
                            ? (max_upload_bytes - kUploadOverheadBytes - 4 * state) / 8
                            : 0;
  return absl::InvalidArgumentError(absl::StrFormat(
      "layers: the network has %d parameters and %d state values, so its model file and "
      "snapshots would take about %d MiB, more than the %d MiB the coordinator accepts for "
      "a model or snapshot upload; at most %d parameters fit (8 bytes each: mean and "
      "variance)",
      params, state, needed >> 20, max_upload_bytes >> 20, room));
}

absl::StatusOr<spec::Architecture> JobArchitecture(const JobSpec& job) {
  Problems p;
  std::optional<spec::Architecture> arch = BuildArchitecture(job, p);
  if (!arch) return p.ToStatus();
  return *std::move(arch);
}

int ExpectedInputWidth(const DataSpec& data) {
  switch (data.kind()) {
    case DataSpec::FASHION_MNIST:
    case DataSpec::MNIST:
      return kImageInputWidth;
    case DataSpec::TOY_CUBIC:
      return 1;
    case DataSpec::CIFAR10:
      return static_cast<int>(kCifar10Shape.size());
    default:
      return 0;
  }
}

int ExpectedOutputWidth(const JobSpec& spec) {
  if (spec.head().has_classification()) {
    const uint32_t k = spec.head().classification().num_classes();
    if (k < 2 || k > static_cast<uint32_t>(HsmTree::kMaxClasses)) return 0;
    if (spec.head().classification().output() == tagi::v1::Head::ONE_HOT) {
      return static_cast<int>(k);
    }
    return HsmTree::OutputWidth(static_cast<int>(k));
  }
  if (spec.head().has_regression()) {
    const int per_target = spec.head().regression().heteroscedastic() ? 2 : 1;
    if (spec.data().kind() == DataSpec::TOY_CUBIC) return per_target;
    if (spec.data().kind() == DataSpec::CSV) {
      const uint32_t targets = TargetColumns(spec.data());
      return targets > kMaxLayerWidth ? 0 : per_target * static_cast<int>(targets);
    }
  }
  return 0;
}

float SigmaVAtEpoch(const tagi::v1::NoiseSchedule& noise, uint64_t epoch) {
  const double decay = noise.has_decay() ? noise.decay() : 1.0;
  const double value = noise.sigma_v() * std::pow(decay, static_cast<double>(epoch));
  return static_cast<float>(std::max<double>(value, noise.sigma_v_min()));
}

bool IsSumReduction(const JobSpec& spec) { return spec.reduction() == JobSpec::SUM; }

bool IsElastic(const JobSpec& spec) {
  return spec.min_world_size() > 0 || spec.max_world_size() > 0;
}
float InitGainWeight(const tagi::v1::Init& init) {
  return init.has_gain_weight() ? init.gain_weight() : 1.0f;
}
float InitGainBias(const tagi::v1::Init& init) {
  return init.has_gain_bias() ? init.gain_bias() : 1.0f;
}
bool StandardizeData(const DataSpec& data) {
  return data.has_standardize() ? data.standardize() : true;
}
uint32_t TargetColumns(const DataSpec& data) {
  return data.has_target_columns() ? data.target_columns() : 1;
}

absl::StatusOr<int> ParseDevice(const std::string& device) {
  if (device.empty() || device == "cpu") return -1;
  constexpr std::string_view kCuda = "cuda:";
  if (device.rfind(kCuda, 0) == 0 && device.size() > kCuda.size()) {
    int ordinal = -1;
    const char* first = device.data() + kCuda.size();
    const char* last = device.data() + device.size();
    auto [ptr, ec] = std::from_chars(first, last, ordinal);
    if (ec == std::errc() && ptr == last && ordinal >= 0 && ordinal < 1024) return ordinal;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", device, "\" is not a device; expected \"cpu\" or \"cuda:N\""));
}

}  // namespace tagi
