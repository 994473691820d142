// Every layer kind the planner can hold has a factory in the CUDA engine's
// registry (built here on the emulated CUDA runtime, which has cuDNN), and a
// kind without one is refused with Unimplemented.
#include <string>

#include "gtest/gtest.h"
#include "spec/network.h"
#include "tagi/v1/job.pb.h"
#include "worker/engine/cuda/layers.h"

namespace tagi::engine::cuda {
namespace {

using tagi::v1::Layer;

TEST(CudaLayerKinds, EveryKindThePlanHoldsHasACudaLayer) {
  const CudaLayerRegistry& r = CudaLayers();
  EXPECT_TRUE(r.duplicates().empty());
  const google::protobuf::EnumDescriptor* d = Layer::Kind_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto kind = static_cast<spec::LayerKind>(d->value(i)->number());
    if (kind == Layer::KIND_UNSPECIFIED || kind == Layer::RESIDUAL) continue;  // not layers
    EXPECT_TRUE(r.Has(kind)) << spec::KindName(kind) << " has no CUDA layer";
  }
}

TEST(CudaLayerKinds, AKindWithoutAFactoryIsUnimplemented) {
  spec::PlannedLayer planned;
  planned.path = "layers[0]";
  planned.spec.kind = Layer::RESIDUAL;
  auto made = CudaLayers().Make(planned);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(made.status().message()).find("the CUDA engine has no"), std::string::npos)
      << made.status();
}

}  // namespace
}  // namespace tagi::engine::cuda
