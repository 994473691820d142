// Every layer kind of tagi.v1.Layer.Kind has rules in the model spec and a
// factory in the CPU engine's registry (the CUDA engine's are checked in
// tests/cuda); a kind without one is refused, never run as something else.
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/kinds.h"
#include "spec/plan.h"
#include "tagi/v1/job.pb.h"
#include "worker/engine/cpu_layers.h"
#include "worker/engine/model.h"

namespace tagi::engine {
namespace {

using tagi::v1::Layer;
using ::testing::HasSubstr;

// The kinds the proto declares (every value, from its descriptor).
std::set<spec::LayerKind> DeclaredKinds() {
  std::set<spec::LayerKind> kinds;
  const google::protobuf::EnumDescriptor* d = Layer::Kind_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto kind = static_cast<spec::LayerKind>(d->value(i)->number());
    if (kind != Layer::KIND_UNSPECIFIED) kinds.insert(kind);
  }
  return kinds;
}

TEST(LayerKinds, EveryDeclaredKindHasSpecRules) {
  for (spec::LayerKind kind : DeclaredKinds()) {
    EXPECT_NE(spec::RulesOf(kind), nullptr) << spec::KindName(kind) << " has no KindRules";
  }
  EXPECT_EQ(spec::RulesOf(Layer::KIND_UNSPECIFIED), nullptr);
}

TEST(LayerKinds, EveryKindThePlanHoldsHasACpuLayer) {
  const CpuLayerRegistry& cpu = CpuLayers();
  EXPECT_TRUE(cpu.duplicates().empty());
  for (spec::LayerKind kind : DeclaredKinds()) {
    // RESIDUAL is structure: the planner turns a block into the layers of
    // its branches and an addition (below), never into a layer.
    if (kind == Layer::RESIDUAL) continue;
    EXPECT_TRUE(cpu.Has(kind)) << spec::KindName(kind) << " has no CPU layer";
  }
  // Nothing registered that the proto does not declare.
  for (spec::LayerKind kind : cpu.Kinds()) EXPECT_TRUE(DeclaredKinds().count(kind));
}

TEST(LayerKinds, ThePlannerNeverHoldsAResidualLayer) {
  spec::Architecture arch;
  arch.input = spec::Shape{4, 1, 1};
  spec::LayerSpec block;
  block.kind = Layer::RESIDUAL;
  spec::LayerSpec linear;
  linear.kind = Layer::LINEAR;
  linear.in = 4;
  linear.out = 4;
  spec::LayerSpec relu;
  relu.kind = Layer::RELU;
  block.main = {linear, relu};
  spec::LayerSpec out = linear;
  out.out = 1;
  arch.layers = {block, out};
  arch.head = {spec::HeadKind::kRegression, 0};
  auto plan = spec::MakePlan(arch, {2, 16});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const spec::PlannedLayer& l : plan->layers) EXPECT_NE(l.spec.kind, Layer::RESIDUAL);
}

TEST(LayerKinds, AKindWithoutAFactoryIsUnimplemented) {
  spec::PlannedLayer planned;
  planned.path = "layers[3]";
  planned.spec.kind = Layer::RESIDUAL;
  auto made = MakeLayer(planned);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(made.status().message()),
              HasSubstr("layers[3]: the CPU engine has no"));
  planned.spec.kind = static_cast<spec::LayerKind>(99);  // a number from a newer proto
  EXPECT_EQ(MakeLayer(planned).status().code(), absl::StatusCode::kUnimplemented);
  // A registry refuses a second factory for one kind.
  CpuLayerRegistry r("test");
  RegisterLinearLayers(r);
  RegisterLinearLayers(r);
  EXPECT_EQ(r.duplicates().size(), 1u);
}

}  // namespace
}  // namespace tagi::engine
