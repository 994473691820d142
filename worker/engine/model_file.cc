#include "worker/engine/model_file.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_codec.h"
#include "common/checksum.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "spec/network_proto.h"

namespace tagi::engine {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'G', 'I', 'M', 'O', 'D', 'L'};
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4 + 8;
constexpr size_t kTrailerBytes = 4;
constexpr uint32_t kMaxVectorLength = 1u << 24;

void PutVector(ByteWriter& w, const std::vector<float>& v) {
  w.PutU32(static_cast<uint32_t>(v.size()));
  w.PutF32Array(v);
}

absl::StatusOr<std::vector<float>> GetVector(ByteReader& r, const char* what) {
  TAGI_ASSIGN_OR_RETURN(const uint32_t n, r.GetU32(what));
  if (n > kMaxVectorLength || size_t{n} * 4 > r.remaining()) {
    return absl::DataLossError(absl::StrFormat("%s: length %d does not fit the file", what, n));
  }
  std::vector<float> v(n);
  TAGI_RETURN_IF_ERROR(r.GetF32Array(what, v));
  return v;
}

// Each mean/stddev pair becomes a data::Standardizer of the input or target
// columns (worker/data/standardize.h): none, one for every column, or one
// per column, with as many standard deviations as means. A classifier's
// targets are labels: no statistics.
absl::Status CheckStatistics(const std::vector<float>& mean, const std::vector<float>& stddev,
                             size_t columns, const char* what) {
  if (mean.size() != stddev.size()) {
    return absl::DataLossError(
        absl::StrFormat("model file holds %d %s means but %d %s standard deviations",
                        mean.size(), what, stddev.size(), what));
  }
  if (mean.size() > 1 && mean.size() != columns) {
    return absl::DataLossError(absl::StrFormat(
        "model file holds statistics of %d %s columns but the architecture has %d", mean.size(),
        what, columns));
  }
  if (mean.size() == 1 && columns == 0) {
    return absl::DataLossError(
        absl::StrFormat("model file holds %s statistics but the architecture has no %s columns",
                        what, what));
  }
  return absl::OkStatus();
}

absl::Status CheckPreprocessing(const Preprocessing& p, const Architecture& arch) {
  TAGI_RETURN_IF_ERROR(CheckStatistics(p.input_mean, p.input_std, arch.input_width(), "input"));
  // A heteroscedastic head has two outputs (mean, noise) per target.
  const bool regression = arch.head.kind == HeadKind::kRegression;
  return CheckStatistics(p.target_mean, p.target_std,
                         regression ? arch.output_width() / arch.head.units_per_target() : 0,
                         "target");
}

// Version 1: a flat list of layers; the input is as wide as the first.
absl::StatusOr<Architecture> GetArchitectureV1(ByteReader& r) {
  Architecture arch;
  TAGI_ASSIGN_OR_RETURN(const uint32_t count, r.GetU32("layer count"));
  if (count == 0 || count > static_cast<uint32_t>(kMaxLayers)) {
    return absl::DataLossError(absl::StrFormat("layer count %d is out of range", count));
  }
  for (uint32_t i = 0; i < count; ++i) {
    LayerDesc d;
    TAGI_ASSIGN_OR_RETURN(const uint8_t kind, r.GetU8("layer kind"));
    d.kind = static_cast<LayerKind>(kind);
    TAGI_ASSIGN_OR_RETURN(d.in, r.GetU32("layer input width"));
    TAGI_ASSIGN_OR_RETURN(d.out, r.GetU32("layer output width"));
    TAGI_ASSIGN_OR_RETURN(d.slope, r.GetF32("layer slope"));
    arch.layers.push_back(d);
  }
  arch.input = {arch.layers.front().in, 1, 1};
  TAGI_ASSIGN_OR_RETURN(const uint8_t head, r.GetU8("head kind"));
  arch.head.kind = static_cast<HeadKind>(head);
  TAGI_ASSIGN_OR_RETURN(arch.head.num_classes, r.GetU32("head classes"));
  if (auto st = ValidateArchitecture(arch); !st.ok()) {
    return absl::DataLossError(absl::StrCat("model file holds an invalid ", st.message()));
  }
  return arch;
}

absl::StatusOr<Architecture> GetArchitectureV2(ByteReader& r) {
  TAGI_ASSIGN_OR_RETURN(const std::string bytes, r.GetString("architecture", kMaxArchitectureBytes));
  tagi::v1::Network network;
  if (!network.ParseFromString(bytes)) {
    return absl::DataLossError("model file holds an architecture that does not parse");
  }
  auto arch = spec::ArchitectureFromProto(network);
  if (!arch.ok()) {
    return absl::DataLossError(absl::StrCat("model file holds an ", arch.status().message()));
  }
  // One architecture has one encoding (the one EncodeModelFile writes): no
  // unknown fields, first-format layers or reordered records, so equal
  // models are equal files.
  if (spec::ArchitectureToProto(*arch).SerializeAsString() != bytes) {
    return absl::DataLossError(
        "model file holds an architecture record that is not in its canonical form");
  }
  return arch;
}

// Version 3's class names: one per class of a classification head (or
// none at all, where `none_allowed`: a model header's).
absl::Status GetClassNames(ByteReader& r, ModelFile& file, bool none_allowed = false) {
  TAGI_ASSIGN_OR_RETURN(const uint32_t k, r.GetU32("class name count"));
  const auto& head = file.architecture.head;
  if (!(none_allowed && k == 0) &&
      (head.kind != HeadKind::kClassification || k != head.num_classes)) {
    return absl::DataLossError(absl::StrFormat(
        "model file holds %d class names for a head of %d classes", k,
        head.kind == HeadKind::kClassification ? head.num_classes : 0));
  }
  for (uint32_t i = 0; i < k; ++i) {
    TAGI_ASSIGN_OR_RETURN(std::string name, r.GetString("class name", kMaxClassNameBytes));
    if (name.empty()) return absl::DataLossError("model file holds an empty class name");
    file.preprocessing.class_names.push_back(std::move(name));
  }
  if (r.remaining() != 0) {
    return absl::DataLossError(
        absl::StrFormat("model file has %d bytes after its class names", r.remaining()));
  }
  return absl::OkStatus();
}

// The standardisation statistics after the architecture, checked against it.
absl::Status GetPreprocessing(ByteReader& r, ModelFile& file) {
  TAGI_ASSIGN_OR_RETURN(file.preprocessing.input_mean, GetVector(r, "input mean"));
  TAGI_ASSIGN_OR_RETURN(file.preprocessing.input_std, GetVector(r, "input std"));
  TAGI_ASSIGN_OR_RETURN(file.preprocessing.target_mean, GetVector(r, "target mean"));
  TAGI_ASSIGN_OR_RETURN(file.preprocessing.target_std, GetVector(r, "target std"));
  TAGI_RETURN_IF_ERROR(CheckPreprocessing(file.preprocessing, file.architecture));
  return absl::OkStatus();
}

absl::Status DecodeBody(ByteReader& r, uint32_t version, ModelFile& file) {
  if (version == 1) {
    TAGI_ASSIGN_OR_RETURN(file.architecture, GetArchitectureV1(r));
  } else {
    TAGI_ASSIGN_OR_RETURN(file.architecture, GetArchitectureV2(r));
  }
  TAGI_RETURN_IF_ERROR(GetPreprocessing(r, file));
  TAGI_ASSIGN_OR_RETURN(const uint64_t n, r.GetU64("parameter count"));
  if (n != file.architecture.num_parameters()) {
    return absl::DataLossError(absl::StrFormat(
        "model file holds %d parameters but its architecture %s has %d", n,
        file.architecture.ToString(), file.architecture.num_parameters()));
  }
  const uint64_t s = version == 1 ? 0 : file.architecture.num_state();
  const size_t state_header = version == 1 ? 0 : sizeof(uint64_t);
  const size_t names_min = version == kModelFileVersionWithClassNames ? sizeof(uint32_t) : 0;
  const uint64_t arrays = 2 * n * sizeof(float) + state_header + s * sizeof(float);
  if (version == kModelFileVersionWithClassNames ? arrays + names_min > r.remaining()
                                                 : arrays != r.remaining()) {
    return absl::DataLossError(absl::StrFormat(
        "model file has %d bytes of parameters and state; expected %d", r.remaining(),
        2 * n * sizeof(float) + state_header + s * sizeof(float)));
  }
  file.parameters.resize(2 * n);
  TAGI_RETURN_IF_ERROR(r.GetF32Array("parameters", file.parameters));
  if (version == 1) return absl::OkStatus();
  TAGI_ASSIGN_OR_RETURN(const uint64_t state, r.GetU64("state count"));
  if (state != s) {
    return absl::DataLossError(absl::StrFormat(
        "model file holds %d state values but its architecture has %d", state, s));
  }
  file.state.resize(s);
  TAGI_RETURN_IF_ERROR(r.GetF32Array("state", file.state));
  if (version != kModelFileVersionWithClassNames) return absl::OkStatus();
  return GetClassNames(r, file);
}

}  // namespace

std::string EncodeModelFile(const Architecture& arch, const Preprocessing& prep,
                            std::span<const float> parameters, std::span<const float> state) {
  ByteWriter body;
  const std::string network = spec::ArchitectureToProto(arch).SerializeAsString();
  body.PutString(network);
  PutVector(body, prep.input_mean);
  PutVector(body, prep.input_std);
  PutVector(body, prep.target_mean);
  PutVector(body, prep.target_std);
  body.PutU64(parameters.size() / 2);
  body.PutF32Array(parameters);
  body.PutU64(state.size());
  body.PutF32Array(state);
  const bool names = !prep.class_names.empty();
  if (names) {
    body.PutU32(static_cast<uint32_t>(prep.class_names.size()));
    for (const std::string& name : prep.class_names) body.PutString(name);
  }

  ByteWriter file;
  file.PutBytes(kMagic, sizeof(kMagic));
  file.PutU32(names ? kModelFileVersionWithClassNames : kModelFileVersion);
  file.PutU64(body.data().size());
  file.PutBytes(body.data().data(), body.data().size());
  file.PutU32(Crc32(file.data().data(), file.data().size()));
  return file.Release();
}

namespace {

constexpr char kHeaderMagic[8] = {'T', 'A', 'G', 'I', 'M', 'H', 'D', 'R'};

}  // namespace

std::string EncodeModelHeader(const Architecture& arch, const Preprocessing& prep) {
  ByteWriter w;
  w.PutBytes(kHeaderMagic, sizeof(kHeaderMagic));
  w.PutString(spec::ArchitectureToProto(arch).SerializeAsString());
  PutVector(w, prep.input_mean);
  PutVector(w, prep.input_std);
  PutVector(w, prep.target_mean);
  PutVector(w, prep.target_std);
  w.PutU32(static_cast<uint32_t>(prep.class_names.size()));
  for (const std::string& name : prep.class_names) w.PutString(name);
  return w.Release();
}

absl::StatusOr<std::string> ModelFileFromHeader(std::span<const char> header,
                                                std::span<const float> parameters,
                                                std::span<const float> state) {
  if (header.size() < sizeof(kHeaderMagic) ||
      std::memcmp(header.data(), kHeaderMagic, sizeof(kHeaderMagic)) != 0) {
    return absl::DataLossError("not a model header (bad magic or too short)");
  }
  ByteReader r(header.subspan(sizeof(kHeaderMagic)));
  ModelFile file;
  TAGI_ASSIGN_OR_RETURN(file.architecture, GetArchitectureV2(r));
  TAGI_RETURN_IF_ERROR(GetPreprocessing(r, file));
  TAGI_RETURN_IF_ERROR(GetClassNames(r, file, /*none_allowed=*/true));
  const Architecture& arch = file.architecture;
  if (parameters.size() != 2 * arch.num_parameters() || state.size() != arch.num_state()) {
    return absl::DataLossError(absl::StrFormat(
        "%d parameters and %d state values do not fit the architecture %s (%d and %d)",
        parameters.size(), state.size(), arch.ToString(), 2 * arch.num_parameters(),
        arch.num_state()));
  }
  return EncodeModelFile(arch, file.preprocessing, parameters, state);
}

absl::StatusOr<ModelFile> DecodeModelFile(std::span<const char> bytes) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a tagi model file (bad magic or too short)");
  }
  ByteReader header(bytes.subspan(sizeof(kMagic)));
  TAGI_ASSIGN_OR_RETURN(const uint32_t version, header.GetU32("format version"));
  if (version != 1 && version != kModelFileVersion &&
      version != kModelFileVersionWithClassNames) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model file format version %d is not supported (this build reads 1 to %d)", version,
        kModelFileVersionWithClassNames));
  }
  TAGI_ASSIGN_OR_RETURN(const uint64_t body_len, header.GetU64("body length"));
  if (body_len != bytes.size() - kHeaderBytes - kTrailerBytes) {
    return absl::DataLossError(absl::StrFormat(
        "model file is truncated or padded: body of %d bytes announced, %d present", body_len,
        bytes.size() - kHeaderBytes - kTrailerBytes));
  }
  ByteReader trailer(bytes.subspan(bytes.size() - kTrailerBytes));
  TAGI_ASSIGN_OR_RETURN(const uint32_t crc, trailer.GetU32("checksum"));
  const uint32_t actual = Crc32(bytes.data(), bytes.size() - kTrailerBytes);
  if (crc != actual) {
    return absl::DataLossError(absl::StrFormat(
        "model file checksum mismatch (stored %08x, computed %08x): the file is corrupt", crc,
        actual));
  }
  ModelFile file;
  ByteReader body(bytes.subspan(kHeaderBytes, body_len));
  TAGI_RETURN_IF_ERROR(DecodeBody(body, version, file));
  return file;
}

absl::Status SaveModelFile(const std::string& path, const Architecture& arch,
                           const Preprocessing& prep, std::span<const float> parameters,
                           std::span<const float> state) {
  return WriteFileAtomic(path, EncodeModelFile(arch, prep, parameters, state));
}

absl::StatusOr<ModelFile> LoadModelFile(const std::string& path) {
  TAGI_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path, kMaxModelFileBytes));
  auto file = DecodeModelFile(bytes);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(path, ": ", file.status().message()));
  }
  return file;
}

absl::Status CheckSameArchitecture(const Architecture& expected, const Architecture& found) {
  if (expected == found) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "architecture mismatch: the job describes ", expected.ToString(), " but the model file holds ",
      found.ToString()));
}

absl::Status CheckParameterValues(std::span<const float> parameters,
                                  std::span<const float> state) {
  if (parameters.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d parameter values: not [means][variances]", parameters.size()));
  }
  const size_t n = parameters.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(parameters[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the mean of parameter %d of %d is %f", i, n, parameters[i]));
    }
    const float var = parameters[n + i];
    if (!std::isfinite(var) || var <= 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the variance of parameter %d of %d is %f", i, n, var));
    }
  }
  for (size_t i = 0; i < state.size(); ++i) {
    if (!std::isfinite(state[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("state value %d of %d is %f", i, state.size(), state[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace tagi::engine
