// LayerRegistry: an engine's layer factories, one per layer kind.
//
// Each engine builds one registry, once, from one registration function per
// layer file: the CPU engine's CpuLayers() (model.cc) calls
// RegisterLinearLayers (linear.cc), RegisterActivationLayers
// (activation.cc), ...; the CUDA engine's CudaLayers() (cuda/layers.cc) does
// the same for its files. A kind that an engine has no factory for is
// refused with Unimplemented when a model is built (never run as something
// else), and a test fails when any kind of tagi.v1.Layer.Kind lacks rules
// (spec/kinds.h) or a factory on any engine. docs/engine.md "Adding a layer
// kind" is the recipe.
//
// Immutable once built; thread-safe to read.
#ifndef TAGI_WORKER_ENGINE_LAYER_REGISTRY_H_
#define TAGI_WORKER_ENGINE_LAYER_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "spec/network.h"
#include "spec/plan.h"

namespace tagi::engine {

template <typename LayerT>
class LayerRegistry {
 public:
  // Not OK (with the reason) when this build cannot make the layer, e.g. a
  // CUDA convolution without cuDNN.
  using Factory =
      std::function<absl::StatusOr<std::unique_ptr<LayerT>>(const spec::PlannedLayer&)>;

  explicit LayerRegistry(std::string engine) : engine_(std::move(engine)) {}

  // One factory per kind; a second one for a kind is recorded in
  // duplicates() (a test keeps it empty) and ignored.
  LayerRegistry& Add(spec::LayerKind kind, Factory factory) {
    if (!factories_.emplace(kind, std::move(factory)).second) duplicates_.push_back(kind);
    return *this;
  }

  absl::StatusOr<std::unique_ptr<LayerT>> Make(const spec::PlannedLayer& planned) const {
    auto it = factories_.find(planned.spec.kind);
    if (it == factories_.end()) {
      return absl::UnimplementedError(absl::StrCat(planned.path, ": the ", engine_,
                                                   " engine has no ",
                                                   spec::KindName(planned.spec.kind), " layer"));
    }
    return it->second(planned);
  }

  bool Has(spec::LayerKind kind) const { return factories_.count(kind) > 0; }
  std::vector<spec::LayerKind> Kinds() const {
    std::vector<spec::LayerKind> out;
    for (const auto& [kind, f] : factories_) out.push_back(kind);
    return out;
  }
  const std::vector<spec::LayerKind>& duplicates() const { return duplicates_; }
  const std::string& engine() const { return engine_; }

 private:
  std::string engine_;
  std::map<spec::LayerKind, Factory> factories_;
  std::vector<spec::LayerKind> duplicates_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_LAYER_REGISTRY_H_
