// World schedules (worker/world_schedule.h): parsing, and the run itself on
// generated data: one world throughout is the plain single-process run
// (world 1) or unchanged by a "change" to the same world (the carry between
// stretches is exact); another world changes the model; batch norm's running
// statistics travel too.
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/loader.h"
#include "worker/trainer.h"
#include "worker/world_schedule.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

TEST(ParseWorldSchedule, TakesStepsAndWorlds) {
  auto s = ParseWorldSchedule("0:3,40:2,80:3");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[1].from_step, 40u);
  EXPECT_EQ((*s)[1].world, 2);
}

TEST(ParseWorldSchedule, RefusesWhatIsNotASchedule) {
  for (const char* bad : {"", "3", "0:3,", "1:3", "0:0", "0:65", "0:2,0:3", "0:2,40:3,20:1",
                          "0:x", "0:2:1", "-1:2"}) {
    auto s = ParseWorldSchedule(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseWorldSchedule("5:2").status().message(), HasSubstr("start at step 0"));
  EXPECT_THAT(ParseWorldSchedule("0:2,4:3,4:1").status().message(), HasSubstr("increase"));
}

// A regression job on 200 generated samples (batch 4, 3 epochs), with a
// batch norm so that running statistics are part of what carries over.
tagi::v1::JobSpec ToyJob() {
  auto spec = ParseJobSpecJson(R"({"name": "toy",
    "layers": [{"linear": {"inFeatures": 1, "outFeatures": 16}}, {"relu": {}},
               {"batchNorm": {}}, {"linear": {"inFeatures": 16, "outFeatures": 1}}],
    "head": {"regression": {}},
    "data": {"kind": "TOY_CUBIC", "toyTrainSize": 200, "toyTestSize": 20},
    "noise": {"sigmaV": 0.3}, "batchSize": 4, "epochs": 3, "seed": 9, "reduction": "SUM"})");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok());
  return *spec;
}

std::vector<float> RunSchedule(const tagi::v1::JobSpec& spec, const data::LoadedData& d,
                       const std::string& schedule, uint64_t* steps = nullptr) {
  RealClock clock;
  auto s = ParseWorldSchedule(schedule);
  EXPECT_TRUE(s.ok()) << s.status();
  auto r = RunWorldSchedule(spec, d, *s, clock, absl::Seconds(30));
  EXPECT_TRUE(r.ok()) << schedule << ": " << r.status();
  if (!r.ok()) return {};
  if (steps != nullptr) *steps = r->steps;
  std::vector<float> all = r->parameters;
  all.insert(all.end(), r->state.begin(), r->state.end());
  return all;
}

TEST(RunWorldSchedule, WorldOneIsThePlainRunAndACarryIsExact) {
  const tagi::v1::JobSpec spec = ToyJob();
  auto d = data::LoadData(spec.data(), spec.seed());
  ASSERT_TRUE(d.ok()) << d.status();
  // The plain single-process run.
  auto model = BuildModel(spec, *d, spec.batch_size());
  ASSERT_TRUE(model.ok()) << model.status();
  RealClock clock;
  Trainer trainer(spec, **model, *d, clock, {});
  for (uint32_t e = 0; e < spec.epochs(); ++e) ASSERT_TRUE(trainer.RunEpoch(e, 0, {}).ok());
  std::vector<float> plain(2 * (*model)->num_parameters());
  ASSERT_TRUE((*model)->ReadParameters(plain).ok());
  std::vector<float> state((*model)->num_state());
  ASSERT_TRUE((*model)->ReadState(state).ok());
  ASSERT_FALSE(state.empty());
  plain.insert(plain.end(), state.begin(), state.end());

  uint64_t steps = 0;
  EXPECT_EQ(RunSchedule(spec, *d, "0:1", &steps), plain);
  EXPECT_EQ(steps, 150u);  // 50 steps an epoch
  // Mid-epoch (step 70 is step 20 of epoch 1) and at an epoch's end (100).
  EXPECT_EQ(RunSchedule(spec, *d, "0:1,70:1,100:1"), plain);
}

TEST(RunWorldSchedule, SameWorldAcrossAChangeIsExactAndAnotherWorldIsNot) {
  const tagi::v1::JobSpec spec = ToyJob();
  auto d = data::LoadData(spec.data(), spec.seed());
  ASSERT_TRUE(d.ok()) << d.status();
  uint64_t steps = 0;
  const std::vector<float> two = RunSchedule(spec, *d, "0:2", &steps);
  EXPECT_EQ(steps, 75u);  // 25 steps an epoch
  EXPECT_EQ(RunSchedule(spec, *d, "0:2,30:2"), two);
  // Three ranks from step 30 (step 5 of epoch 1: offset 40 of 200): the
  // epoch goes on in global batches of 12, 14 more steps to its end.
  uint64_t mixed_steps = 0;
  const std::vector<float> mixed = RunSchedule(spec, *d, "0:2,30:3", &mixed_steps);
  EXPECT_NE(mixed, two);
  EXPECT_EQ(mixed_steps, 30u + 14u + 17u);  // ceil(160 / 12) = 14, then ceil(200 / 12)
}

TEST(RunWorldSchedule, RefusesGpuJobs) {
  tagi::v1::JobSpec spec = ToyJob();
  auto d = data::LoadData(spec.data(), spec.seed());
  ASSERT_TRUE(d.ok());
  spec.set_device("cuda:0");
  RealClock clock;
  auto r = RunWorldSchedule(spec, *d, {{0, 2}}, clock);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("CPU"));
}

}  // namespace
}  // namespace tagi
