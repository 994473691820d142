// tagi-train: single-process TAGI training and evaluation.
//
//   tagi-train JOB.json [--epochs N] [--device cpu|cuda:N] [--threads T] [--out model.tagi]
//              [--json]
//   tagi-train --eval model.tagi JOB.json [--device cpu|cuda:N] [--json]
//   tagi-train JOB.json --world-schedule 0:3,40:2,80:3 [--out model.tagi] [--json]
//
// --world-schedule trains as an uninterrupted data-parallel run whose world
// changes at the given global steps (its ranks are threads of this process;
// worker/world_schedule.h): the model an elastic job must equal when it
// went through those worlds (its Job.worlds).
//
// The reference that data-parallel runs are checked against, and what a
// researcher runs first. main() parses flags into Options, sets the
// process-wide BLAS thread count (--threads) and calls Run() with the real
// clock.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/job_spec.h"
#include "common/progress_bar.h"
#include "common/rng.h"
#include "common/status.h"
#include "worker/data/loader.h"
#include "worker/engine/blas.h"
#include "worker/engine/engine_factory.h"
#include "worker/engine/model.h"
#include "worker/engine/model_file.h"
#include "worker/trainer.h"
#include "worker/world_schedule.h"

ABSL_FLAG(int, epochs, 0, "Override the job's number of epochs (0: the job's).");
ABSL_FLAG(int, threads, 1, "BLAS threads of the CPU engine.");
ABSL_FLAG(std::string, device, "",
          "\"cpu\" or \"cuda:N\": where to train (empty: the job's \"device\").");
ABSL_FLAG(std::string, out, "", "Write the trained model to this file.");
ABSL_FLAG(bool, json, false, "End with one JSON line of final metrics on stdout.");
ABSL_FLAG(std::string, eval, "", "Evaluate this model file on the job's test data instead of training.");
ABSL_FLAG(bool, progress, true, "Show a progress bar when stderr is a terminal.");
ABSL_FLAG(std::string, world_schedule, "",
          "FROM:WORLD,...: train through these worlds (ranks as threads over loopback), the "
          "reference of an elastic job whose Job.worlds says the same.");

namespace tagi {
namespace {

struct Options {
  std::string job_path;
  int epochs = 0;
  int threads = 1;
  std::string device;  // empty: the job's
  std::string out;
  bool json = false;
  std::string eval;
  bool progress = true;
  std::string world_schedule;
};

constexpr size_t kEvalBatch = 256;

std::string MetricsText(const tagi::v1::JobSpec& spec, const EvalMetrics& m) {
  if (spec.head().has_classification()) {
    return absl::StrFormat("test accuracy %.2f%%  test log-likelihood %.4f  ECE %.4f  Brier %.4f",
                           100.0 * m.accuracy, m.log_likelihood, m.ece, m.brier);
  }
  return absl::StrFormat(
      "test RMSE %.4f  test log-likelihood %.4f  coverage 68%% %.1f%%  95%% %.1f%%  mean sd %.4g",
      m.rmse, m.log_likelihood, 100.0 * m.coverage_68, 100.0 * m.coverage_95, m.mean_std);
}

std::string MetricsJson(const tagi::v1::JobSpec& spec, const EvalMetrics& m) {
  if (spec.head().has_classification()) {
    return absl::StrFormat(
        "\"test_accuracy\":%.6f,\"test_log_likelihood\":%.6f,\"test_nll\":%.6f,"
        "\"test_ece\":%.6f,\"test_brier\":%.6f",
        m.accuracy, m.log_likelihood, m.nll, m.ece, m.brier);
  }
  return absl::StrFormat(
      "\"test_rmse\":%.6f,\"test_log_likelihood\":%.6f,\"test_nll\":%.6f,"
      "\"test_coverage_68\":%.6f,\"test_coverage_95\":%.6f,\"test_mean_std\":%.6g",
      m.rmse, m.log_likelihood, m.nll, m.coverage_68, m.coverage_95, m.mean_std);
}

absl::StatusOr<tagi::v1::JobSpec> LoadJob(const Options& opt) {
  TAGI_ASSIGN_OR_RETURN(tagi::v1::JobSpec spec, LoadJobSpecFile(opt.job_path));
  if (opt.epochs > 0) spec.set_epochs(static_cast<uint32_t>(opt.epochs));
  if (!opt.device.empty()) spec.set_device(opt.device);
  TAGI_RETURN_IF_ERROR(ValidateJobSpec(spec));
  TAGI_RETURN_IF_ERROR(data::CheckDataFiles(spec.data()));
  return spec;
}

absl::Status RunEval(const Options& opt, const tagi::v1::JobSpec& spec) {
  TAGI_ASSIGN_OR_RETURN(engine::ModelFile file, engine::LoadModelFile(opt.eval));
  TAGI_ASSIGN_OR_RETURN(const engine::Architecture arch, engine::ArchitectureFromJobSpec(spec));
  TAGI_RETURN_IF_ERROR(engine::CheckSameArchitecture(arch, file.architecture));
  // Standardise with the statistics stored in the model, not re-fitted ones.
  tagi::v1::DataSpec raw = spec.data();
  raw.set_standardize(false);
  TAGI_ASSIGN_OR_RETURN(data::LoadedData d,
                        data::LoadData(raw, spec.seed(), data::LoadOptionsFor(spec)));
  if (d.data.test.input_dim != arch.input_width()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the data has %d inputs per sample but the model takes %d", d.data.test.input_dim,
        arch.input_width()));
  }
  const auto& prep = file.preprocessing;
  data::Standardizer input{prep.input_mean, prep.input_std};
  data::Standardizer target{prep.target_mean, prep.target_std};
  auto& test = d.data.test;
  if (!input.empty()) data::Apply(input, test.inputs, test.input_dim);
  if (!target.empty()) data::Apply(target, test.targets, test.output_dim);

  TAGI_ASSIGN_OR_RETURN(const int device, ParseDevice(spec.device()));
  TAGI_ASSIGN_OR_RETURN(auto model, engine::CreateEngine(arch, kEvalBatch, device));
  TAGI_RETURN_IF_ERROR(model->WriteParameters(file.parameters));
  TAGI_RETURN_IF_ERROR(model->WriteState(file.state));
  const float sigma_v = SigmaVAtEpoch(spec.noise(), spec.epochs() - 1);
  TAGI_ASSIGN_OR_RETURN(
      const EvalSums sums,
      ScoreModel(*model, test, target, sigma_v, kEvalBatch, 0, test.num_samples));
  const EvalMetrics m = MetricsFromSums(sums, test.is_classification());
  TAGI_ASSIGN_OR_RETURN(const uint64_t fingerprint, model->ParameterFingerprint());
  std::fprintf(stderr, "%s: %zu test samples  %s\n", opt.eval.c_str(), m.samples,
               MetricsText(spec, m).c_str());
  if (opt.json) {
    std::printf("{\"model\":\"%s\",\"test_samples\":%zu,%s,\"parameter_checksum\":\"%s\"}\n",
                opt.eval.c_str(), m.samples, MetricsJson(spec, m).c_str(),
                FingerprintHex(fingerprint).c_str());
  }
  return absl::OkStatus();
}

// The checksum line, --out and --json of a finished training run.
absl::Status Finish(const Options& opt, const tagi::v1::JobSpec& spec,
                    const engine::Architecture& arch, const engine::Preprocessing& prep,
                    const std::vector<float>& parameters, const std::vector<float>& state,
                    const EvalMetrics& test, double seconds, size_t samples,
                    const std::string& extra_json) {
  const std::string checksum = FingerprintHex(
      ModelFingerprint(parameters.data(), parameters.size(), state.data(), state.size()));
  if (!opt.out.empty()) {
    TAGI_RETURN_IF_ERROR(engine::SaveModelFile(opt.out, arch, prep, parameters, state));
    std::fprintf(stderr, "model written to %s (parameter checksum %s)\n", opt.out.c_str(),
                 checksum.c_str());
  }
  if (opt.json) {
    std::printf("{\"job\":\"%s\",\"epochs\":%u,%s,\"train_seconds\":%.3f,"
                "\"samples_per_second\":%.1f,\"parameter_checksum\":\"%s\"%s}\n",
                spec.name().c_str(), spec.epochs(), MetricsJson(spec, test).c_str(), seconds,
                seconds > 0 ? samples / seconds : 0.0, checksum.c_str(), extra_json.c_str());
  }
  return absl::OkStatus();
}

absl::Status RunSchedule(const Options& opt, const tagi::v1::JobSpec& spec, Clock& clock) {
  TAGI_ASSIGN_OR_RETURN(const std::vector<WorldStretch> schedule,
                        ParseWorldSchedule(opt.world_schedule));
  TAGI_ASSIGN_OR_RETURN(const data::LoadedData d,
                        data::LoadData(spec.data(), spec.seed(), data::LoadOptionsFor(spec)));
  const absl::Time start = clock.Now();
  TAGI_ASSIGN_OR_RETURN(const ScheduleResult r, RunWorldSchedule(spec, d, schedule, clock));
  const double seconds = absl::ToDoubleSeconds(clock.Now() - start);
  std::string worlds;
  for (const WorldStretch& s : schedule) {
    if (s.from_step >= r.steps) break;
    absl::StrAppend(&worlds, worlds.empty() ? "" : ",", s.from_step, ":", s.world);
  }
  std::fprintf(stderr, "%s: %d steps through worlds %s  %s  %.2f s\n",
               spec.name().empty() ? opt.job_path.c_str() : spec.name().c_str(),
               static_cast<int>(r.steps), worlds.c_str(),
               MetricsText(spec, r.last_epoch.test).c_str(), seconds);
  return Finish(opt, spec, r.architecture, r.preprocessing, r.parameters, r.state,
                r.last_epoch.test, seconds, 0,
                absl::StrFormat(",\"steps\":%d,\"worlds\":\"%s\"", r.steps, worlds));
}

absl::Status RunTrain(const Options& opt, const tagi::v1::JobSpec& spec, Clock& clock) {
  if (!opt.world_schedule.empty()) return RunSchedule(opt, spec, clock);
  TAGI_ASSIGN_OR_RETURN(const data::LoadedData d,
                        data::LoadData(spec.data(), spec.seed(), data::LoadOptionsFor(spec)));
  TAGI_ASSIGN_OR_RETURN(const int device, ParseDevice(spec.device()));
  TAGI_ASSIGN_OR_RETURN(auto model, BuildModel(spec, d, spec.batch_size(), device));
  const engine::Architecture& arch = model->architecture();
  TrainerOptions options;
  options.eval_batch = kEvalBatch;
  Trainer trainer(spec, *model, d, clock, std::move(options));
  std::fprintf(stderr,
               "%s: %s, %zu parameters, %zu training / %zu test samples, batch %u, on %s\n",
               spec.name().empty() ? opt.job_path.c_str() : spec.name().c_str(),
               arch.ToString().c_str(), arch.num_parameters(), d.data.train.num_samples,
               d.data.test.num_samples, spec.batch_size(), model->device().c_str());

  const bool bar = opt.progress && ::isatty(STDERR_FILENO);
  ProgressPrinter printer(stderr, clock, absl::Milliseconds(100));
  EpochMetrics last;
  double total_seconds = 0.0;
  size_t total_samples = 0;
  for (uint32_t e = 0; e < spec.epochs(); ++e) {
    const std::string label = absl::StrFormat("epoch %d/%d", e + 1, spec.epochs());
    ProgressFn progress;
    if (bar) {
      progress = [&](uint64_t, size_t step, size_t steps, absl::Duration elapsed) {
        const double sec = absl::ToDoubleSeconds(elapsed);
        const double rate = sec > 0 ? step * spec.batch_size() / sec : 0.0;
        const auto eta = rate > 0 ? absl::Seconds((steps - step) * spec.batch_size() / rate)
                                  : absl::InfiniteDuration();
        printer.Update(RenderProgressBar(label, step * spec.batch_size(),
                                         steps * spec.batch_size(), rate, eta),
                       step == steps);
      };
    }
    TAGI_ASSIGN_OR_RETURN(last, trainer.RunEpoch(e, 0, progress));
    printer.Finish();
    total_seconds += last.seconds;
    total_samples += last.samples;
    std::string train_acc;
    if (spec.head().has_classification()) {
      train_acc = absl::StrFormat("train accuracy %.2f%%  ", 100.0 * last.train_accuracy);
    }
    // A heteroscedastic head learns its noise: no sigma_v to show.
    const std::string noise = spec.head().regression().heteroscedastic()
                                  ? std::string("noise learned")
                                  : absl::StrFormat("sigma_v %g", last.sigma_v);
    std::fprintf(stderr, "%s  %s%s  %s  %s samples/s  %.2f s\n", label.c_str(), train_acc.c_str(),
                 MetricsText(spec, last.test).c_str(), noise.c_str(),
                 HumanCount(last.samples_per_second).c_str(), last.seconds);
  }
  std::vector<float> parameters(2 * model->num_parameters());
  TAGI_RETURN_IF_ERROR(model->ReadParameters(parameters));
  std::vector<float> state(model->num_state());
  TAGI_RETURN_IF_ERROR(model->ReadState(state));
  // The data set's fingerprint: what the workers of a job compare.
  return Finish(opt, spec, arch, trainer.preprocessing(), parameters, state, last.test,
                total_seconds, total_samples,
                absl::StrFormat(",\"data_fingerprint\":\"%s\"", FingerprintHex(d.fingerprint)));
}

int Run(const Options& opt, Clock& clock) {
  absl::Status st;
  auto spec = LoadJob(opt);
  if (!spec.ok()) {
    st = spec.status();
  } else {
    st = opt.eval.empty() ? RunTrain(opt, *spec, clock) : RunEval(opt, *spec);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "tagi-train: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tagi

int main(int argc, char** argv) {
  tagi::engine::ReexecWithShortBlasSpin(argv);  // before anything else (blas.h)
  absl::SetProgramUsageMessage(
      "single-process TAGI training.\n"
      "  tagi-train JOB.json [--epochs N] [--device cpu|cuda:N] [--threads T] [--out model.tagi]\n"
      "             [--json]\n"
      "  tagi-train --eval model.tagi JOB.json [--device cpu|cuda:N] [--json]\n"
      "  tagi-train JOB.json --world-schedule 0:3,40:2,80:3 [--out model.tagi] [--json]\n"
      "Run with --helpfull for every flag.");
  std::vector<char*> args = tagi::ParseFlags(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "tagi-train: expected exactly one job file (got %zu); see --help\n",
                 args.size() - 1);
    return 2;
  }
  tagi::Options opt;
  opt.job_path = args[1];
  opt.epochs = absl::GetFlag(FLAGS_epochs);
  opt.threads = absl::GetFlag(FLAGS_threads);
  opt.device = absl::GetFlag(FLAGS_device);
  opt.out = absl::GetFlag(FLAGS_out);
  opt.json = absl::GetFlag(FLAGS_json);
  opt.eval = absl::GetFlag(FLAGS_eval);
  opt.progress = absl::GetFlag(FLAGS_progress);
  opt.world_schedule = absl::GetFlag(FLAGS_world_schedule);
  if (opt.epochs < 0 || opt.threads < 1 || opt.threads > 256) {
    std::fprintf(stderr, "tagi-train: --epochs must be >= 0 and --threads in 1..256\n");
    return 2;
  }
  // Process-wide (see blas.h): set here, once, before any engine runs.
  tagi::engine::SetBlasThreads(opt.threads);
  tagi::RealClock clock;
  return tagi::Run(opt, clock);
}
