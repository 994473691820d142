// InitFrom (worker/trainer.h): a job that starts from a model file takes its
// parameters and running statistics exactly, and refuses a file of another
// network or one it cannot read with the path in the message.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "worker/engine/cpu_engine.h"
#include "worker/engine/model_file.h"
#include "worker/trainer.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

engine::Architecture Net(uint32_t hidden) {
  engine::Architecture arch;
  arch.input = {2, 3, 3};
  engine::LayerDesc conv;
  conv.kind = tagi::v1::Layer::CONV2D;
  conv.in = 2;
  conv.out = 3;
  conv.kernel = 3;
  conv.stride = 1;
  conv.padding = 1;
  conv.padding_type = tagi::v1::Layer::SYMMETRIC;
  conv.bias = true;
  engine::LayerDesc bn;
  bn.kind = tagi::v1::Layer::BATCH_NORM;
  bn.eps = 1e-5f;
  bn.momentum = 0.9f;
  bn.bias = true;
  engine::LayerDesc lin;
  lin.kind = tagi::v1::Layer::LINEAR;
  lin.in = 27;
  lin.out = hidden;
  arch.layers = {conv, bn, lin};
  arch.head = {engine::HeadKind::kRegression, 0};
  return arch;
}

std::unique_ptr<engine::CpuEngine> Engine(const engine::Architecture& arch, uint64_t seed) {
  auto e = engine::CpuEngine::Create(arch, 4);
  EXPECT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE((*e)->Initialize(seed, {}).ok());
  return std::move(*e);
}

TEST(InitFrom, TakesTheFilesParametersAndRunningStatisticsExactly) {
  testing::TempDir dir;
  const engine::Architecture arch = Net(4);
  auto source = Engine(arch, 11);
  Rng rng(3);
  std::vector<float> state(source->num_state());
  for (float& s : state) s = static_cast<float>(rng.Uniform());
  ASSERT_TRUE(source->WriteState(state).ok());
  std::vector<float> params(2 * source->num_parameters());
  ASSERT_TRUE(source->ReadParameters(params).ok());
  const std::string path = dir.File("start.tagi");
  ASSERT_TRUE(engine::SaveModelFile(path, arch, {}, params, state).ok());

  auto model = Engine(arch, 99);  // the seed's draw, then the file
  ASSERT_NE(*model->ParameterFingerprint(), *source->ParameterFingerprint());
  ASSERT_TRUE(InitFrom(path, *model).ok());
  std::vector<float> got(params.size()), got_state(state.size());
  ASSERT_TRUE(model->ReadParameters(got).ok());
  ASSERT_TRUE(model->ReadState(got_state).ok());
  EXPECT_EQ(got, params);
  EXPECT_EQ(got_state, state);
  EXPECT_EQ(*model->ParameterFingerprint(), *source->ParameterFingerprint());
}

TEST(InitFrom, AFileOfAnotherNetworkIsRefusedNamingBoth) {
  testing::TempDir dir;
  auto other = Engine(Net(5), 1);
  std::vector<float> params(2 * other->num_parameters()), state(other->num_state());
  ASSERT_TRUE(other->ReadParameters(params).ok());
  ASSERT_TRUE(other->ReadState(state).ok());
  const std::string path = dir.File("other.tagi");
  ASSERT_TRUE(engine::SaveModelFile(path, Net(5), {}, params, state).ok());
  auto model = Engine(Net(4), 1);
  const absl::Status st = InitFrom(path, *model);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("init_from " + path));
  EXPECT_THAT(std::string(st.message()), HasSubstr("another network"));
}

TEST(InitFrom, AMissingOrDamagedFileIsRefusedWithItsPath) {
  testing::TempDir dir;
  auto model = Engine(Net(4), 1);
  const absl::Status missing = InitFrom(dir.File("none.tagi"), *model);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr("init_from: "));
  EXPECT_THAT(std::string(missing.message()), HasSubstr(dir.File("none.tagi")));
  const std::string junk = dir.Write("junk.tagi", "not a model file at all, just words");
  const absl::Status damaged = InitFrom(junk, *model);
  EXPECT_FALSE(damaged.ok());
  EXPECT_THAT(std::string(damaged.message()), HasSubstr("init_from: " + junk));
  EXPECT_THAT(std::string(damaged.message()), ::testing::Not(HasSubstr("just words")));
}

}  // namespace
}  // namespace tagi
