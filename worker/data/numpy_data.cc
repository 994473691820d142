#include "worker/data/numpy_data.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "worker/data/npz.h"

namespace tagi::data {
namespace {

using tagi::v1::DataSpec;

bool IsInteger(NpyType t) { return !IsFloat(t) && t != NpyType::kBool; }

// The per-sample geometry of x: (C, H, W) for images, else (D, 1, 1) with
// `image` false.
struct Geometry {
  uint64_t c = 0, h = 1, w = 1;
  bool image = false;
  bool nhwc = false;
};

absl::StatusOr<Geometry> GeometryOf(const NpyArray& x, const std::string& name,
                                    DataSpec::ImageLayout layout) {
  const auto& s = x.shape;
  if (s.empty())
    return absl::InvalidArgumentError(absl::StrCat(name,
                                                   ": x is a scalar; "
                                                   "expected [N, ...] samples"));
  Geometry g;
  if (s.size() == 3) {
    g = {1, s[1], s[2], true, false};
  } else if (s.size() == 4 && layout == DataSpec::NHWC) {
    g = {s[3], s[1], s[2], true, true};
  } else if (s.size() == 4) {
    g = {s[1], s[2], s[3], true, false};
  } else {
    g.c = 1;
    for (size_t i = 1; i < s.size(); ++i) g.c *= s[i];
  }
  if (g.c * g.h * g.w == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": x has samples of 0 values (shape has a 0 after N)"));
  }
  if (g.c * g.h * g.w > (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": samples of more than 2^31 values"));
  }
  return g;
}

absl::Status ReadInputs(const NpyArray& x, const std::string& name, const Geometry& g,
                        Dataset& out) {
  if (!IsFloat(x.type) && x.type != NpyType::kUint8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: x has dtype %s; expected float32, float64 or uint8", name, NpyTypeName(x.type)));
  }
  const uint64_t n = x.shape[0];
  const uint64_t d = g.c * g.h * g.w;
  out.inputs.resize(n * d);
  // uint8 pixels become value / 255, as the IDX and image readers make them.
  const float divisor = x.type == NpyType::kUint8 ? 255.0f : 1.0f;
  for (uint64_t i = 0; i < n; ++i) {
    for (uint64_t k = 0; k < d; ++k) {
      // k walks the file's order; NHWC data goes to its CHW place.
      uint64_t dst = k;
      if (g.nhwc) {
        const uint64_t c = k % g.c, pixel = k / g.c;
        dst = c * g.h * g.w + pixel;
      }
      const double v = NpyElement(x, i * d + k);
      if (!std::isfinite(v) || !std::isfinite(static_cast<float>(v))) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: x holds a non-finite value (or one beyond float range) in sample %d", name, i));
      }
      out.inputs[i * d + dst] = static_cast<float>(v) / divisor;
    }
  }
  out.input_dim = d;
  if (g.image) {
    out.channels = static_cast<uint32_t>(g.c);
    out.height = static_cast<uint32_t>(g.h);
    out.width = static_cast<uint32_t>(g.w);
  }
  return absl::OkStatus();
}

absl::Status ReadLabels(const NpyArray& y, const std::string& name, int num_classes, Dataset& out) {
  if (!IsInteger(y.type)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: y has dtype %s; a classification job needs integer class labels", name,
                        NpyTypeName(y.type)));
  }
  if (y.shape.size() != 1 && !(y.shape.size() == 2 && y.shape[1] == 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: y has rank %d; class labels are [N] (or [N, 1])", name, y.shape.size()));
  }
  out.labels.resize(y.shape[0]);
  for (uint64_t i = 0; i < y.shape[0]; ++i) {
    const double v = NpyElement(y, i);
    if (v < 0 || v >= num_classes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: label %.0f of sample %d is out of range; expected 0..%d (num_classes %d)", name, v,
          i, num_classes - 1, num_classes));
    }
    out.labels[i] = static_cast<int32_t>(v);
  }
  out.num_classes = num_classes;
  return absl::OkStatus();
}

absl::Status ReadTargets(const NpyArray& y, const std::string& name, Dataset& out) {
  if (y.type == NpyType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": y has dtype bool; regression targets are numbers"));
  }
  if (y.shape.empty() || y.shape.size() > 2 || (y.shape.size() == 2 && y.shape[1] == 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: y has rank %d; regression targets are [N] or [N, k] with k >= 1", name,
                        y.shape.size()));
  }
  const uint64_t k = y.shape.size() == 2 ? y.shape[1] : 1;
  out.targets.resize(y.shape[0] * k);
  for (uint64_t i = 0; i < out.targets.size(); ++i) {
    const double v = NpyElement(y, i);
    if (!std::isfinite(v) || !std::isfinite(static_cast<float>(v))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: y holds a non-finite target in sample %d", name, i / k));
    }
    out.targets[i] = static_cast<float>(v);
  }
  out.output_dim = k;
  return absl::OkStatus();
}

struct Pair {
  NpyArray x, y;
  std::string x_name, y_name;
};

absl::StatusOr<Dataset> FromPair(const Pair& p, DataSpec::ImageLayout layout, int classes) {
  return DatasetFromNpy(p.x, p.x_name, p.y, p.y_name, layout, classes);
}

absl::StatusOr<NumpySplits> LoadNpz(const DataSpec& spec, const DataAccess& access, int classes) {
  std::map<std::string, std::vector<uint8_t>> members;
  {  // the archive's pages go as soon as the members are out
    TAGI_ASSIGN_OR_RETURN(const MappedFile file,
                          MapDataFile("data.npz", spec.npz(), access, kMaxNumpyBytes));
    TAGI_ASSIGN_OR_RETURN(members, ReadNpzMembers(file.bytes(), spec.npz(),
                                                  {"x_train", "y_train", "x_test", "y_test"},
                                                  kMaxNumpyBytes));
  }
  const bool has_test = members.count("x_test") + members.count("y_test") > 0;
  for (const char* name : {"x_train", "y_train"}) {
    if (members.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(spec.npz(), ": the archive has no ", name,
                                                     ".npy (an NPZ data set holds x_train, "
                                                     "y_train and optionally x_test, y_test)"));
    }
  }
  if (has_test && members.count("x_test") + members.count("y_test") != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.npz(), ": the archive has only one of x_test.npy and y_test.npy"));
  }
  auto parse = [&](const char* name) -> absl::StatusOr<std::pair<NpyArray, std::string>> {
    const std::string what = absl::StrCat(spec.npz(), " member ", name, ".npy");
    const std::vector<uint8_t>& bytes = members.at(name);
    TAGI_ASSIGN_OR_RETURN(NpyArray a, ParseNpy(bytes, what, kMaxNumpyBytes));
    return std::make_pair(a, what);
  };
  NumpySplits out;
  {
    TAGI_ASSIGN_OR_RETURN(auto x, parse("x_train"));
    TAGI_ASSIGN_OR_RETURN(auto y, parse("y_train"));
    TAGI_ASSIGN_OR_RETURN(out.train,
                          FromPair({x.first, y.first, x.second, y.second}, spec.layout(), classes));
  }
  members.erase("x_train");  // converted: its bytes are no longer needed
  members.erase("y_train");
  if (has_test) {
    TAGI_ASSIGN_OR_RETURN(auto x, parse("x_test"));
    TAGI_ASSIGN_OR_RETURN(auto y, parse("y_test"));
    TAGI_ASSIGN_OR_RETURN(out.test,
                          FromPair({x.first, y.first, x.second, y.second}, spec.layout(), classes));
  }
  return out;
}

absl::StatusOr<Dataset> LoadNpyPair(const std::string& x_field, const std::string& x_path,
                                    const std::string& y_field, const std::string& y_path,
                                    const DataSpec& spec, const DataAccess& access, int classes) {
  TAGI_ASSIGN_OR_RETURN(const MappedFile xf,
                        MapDataFile(x_field, x_path, access, kMaxNumpyBytes + kMaxNpyHeaderBytes));
  TAGI_ASSIGN_OR_RETURN(const MappedFile yf,
                        MapDataFile(y_field, y_path, access, kMaxNumpyBytes + kMaxNpyHeaderBytes));
  TAGI_ASSIGN_OR_RETURN(const NpyArray x, ParseNpy(xf.bytes(), x_path, kMaxNumpyBytes));
  TAGI_ASSIGN_OR_RETURN(const NpyArray y, ParseNpy(yf.bytes(), y_path, kMaxNumpyBytes));
  return DatasetFromNpy(x, x_path, y, y_path, spec.layout(), classes);
}

}  // namespace

absl::StatusOr<Dataset> DatasetFromNpy(const NpyArray& x, const std::string& x_name,
                                       const NpyArray& y, const std::string& y_name,
                                       DataSpec::ImageLayout layout, int num_classes) {
  TAGI_ASSIGN_OR_RETURN(const Geometry g, GeometryOf(x, x_name, layout));
  if (y.shape.empty() || y.shape[0] != x.shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s holds %d samples but %s holds %s targets", x_name, x.shape[0], y_name,
                        y.shape.empty() ? std::string("no") : absl::StrCat(y.shape[0])));
  }
  if (x.shape[0] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(x_name, ": no samples (N is 0)"));
  }
  Dataset out;
  out.num_samples = x.shape[0];
  TAGI_RETURN_IF_ERROR(ReadInputs(x, x_name, g, out));
  if (num_classes > 0) {
    TAGI_RETURN_IF_ERROR(ReadLabels(y, y_name, num_classes, out));
  } else {
    TAGI_RETURN_IF_ERROR(ReadTargets(y, y_name, out));
  }
  return out;
}

absl::StatusOr<NumpySplits> LoadNumpy(const DataSpec& spec, const DataAccess& access,
                                      int num_classes) {
  if (!spec.npz().empty()) return LoadNpz(spec, access, num_classes);
  NumpySplits out;
  TAGI_ASSIGN_OR_RETURN(out.train,
                        LoadNpyPair("data.train_x_npy", spec.train_x_npy(), "data.train_y_npy",
                                    spec.train_y_npy(), spec, access, num_classes));
  if (!spec.test_x_npy().empty() || !spec.test_y_npy().empty()) {
    TAGI_ASSIGN_OR_RETURN(out.test,
                          LoadNpyPair("data.test_x_npy", spec.test_x_npy(), "data.test_y_npy",
                                      spec.test_y_npy(), spec, access, num_classes));
  }
  return out;
}

}  // namespace tagi::data
