#include "worker/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/http_server.h"

namespace tagi {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

namespace {

// Steps take from ~0.1 ms (a small MLP on a GPU) to seconds (a large model
// at a large batch on a CPU); all-reduces span the same range.
const Histogram::BucketBoundaries kStepBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                  0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                  1,      2.5,     5,      10};

Family<Gauge>& GaugeFamily(prometheus::Registry& r, const std::string& name,
                           const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

// The gauges set after each epoch: which jobs have each (their series is
// made at the first epoch that sets it) and where its value comes from.
enum class EpochJobs { kAll, kClassification, kRegression };
struct EpochGauge {
  const char* name;
  const char* help;
  EpochJobs jobs;
  double (*value)(const EpochMetrics&);
};
constexpr EpochGauge kEpochGauges[] = {
    {"tagi_worker_train_accuracy",
     "Training accuracy of the last epoch on this rank's batches (classification).",
     EpochJobs::kClassification, [](const EpochMetrics& m) { return m.train_accuracy; }},
    {"tagi_worker_test_accuracy", "Test accuracy after the last epoch (classification).",
     EpochJobs::kClassification, [](const EpochMetrics& m) { return m.test.accuracy; }},
    {"tagi_worker_test_log_likelihood",
     "Average predictive log-likelihood per test sample after the last epoch.", EpochJobs::kAll,
     [](const EpochMetrics& m) { return m.test.log_likelihood; }},
    {"tagi_worker_test_rmse", "Test RMSE after the last epoch (regression).",
     EpochJobs::kRegression, [](const EpochMetrics& m) { return m.test.rmse; }},
    {"tagi_worker_sigma_v", "Observation noise sigma_v used in the last epoch.", EpochJobs::kAll,
     [](const EpochMetrics& m) { return static_cast<double>(m.sigma_v); }},
    {"tagi_worker_test_ece",
     "Expected calibration error of the test predictions after the last epoch (15 bins of the "
     "top probability; classification).",
     EpochJobs::kClassification, [](const EpochMetrics& m) { return m.test.ece; }},
    {"tagi_worker_test_nll",
     "Negative log-likelihood per test sample (per observed target for regression) after the "
     "last epoch.",
     EpochJobs::kAll, [](const EpochMetrics& m) { return m.test.nll; }},
    {"tagi_worker_test_brier",
     "Brier score per test sample after the last epoch (classification).",
     EpochJobs::kClassification, [](const EpochMetrics& m) { return m.test.brier; }},
    {"tagi_worker_test_coverage_68",
     "Share of test targets inside the central 68 % predictive interval after the last epoch "
     "(regression).",
     EpochJobs::kRegression, [](const EpochMetrics& m) { return m.test.coverage_68; }},
    {"tagi_worker_test_coverage_95",
     "Share of test targets inside the central 95 % predictive interval after the last epoch "
     "(regression).",
     EpochJobs::kRegression, [](const EpochMetrics& m) { return m.test.coverage_95; }},
    {"tagi_worker_test_predictive_std",
     "Mean predictive standard deviation of the test targets after the last epoch "
     "(regression).",
     EpochJobs::kRegression, [](const EpochMetrics& m) { return m.test.mean_std; }},
};
constexpr size_t kNumEpochGauges = std::size(kEpochGauges);

}  // namespace

struct WorkerMetricsState {
  // The series of one job attempt; epoch gauges are null until its first
  // epoch ends (and the accuracies, or the RMSE, stay null).
  struct Series {
    Gauge* samples_per_second = nullptr;
    Histogram* compute = nullptr;
    Histogram* allreduce = nullptr;
    Histogram* allreduce_wait = nullptr;
    Counter* allreduce_bytes = nullptr;
    Counter* steps = nullptr;
    Gauge* epoch = nullptr;
    std::array<Gauge*, kNumEpochGauges> epoch_gauges{};  // as kEpochGauges
  };

  WorkerMetricsState()
      : registry(std::make_shared<prometheus::Registry>()),
        samples_per_second(GaugeFamily(*registry, "tagi_worker_samples_per_second",
                                       "Training samples per second of this rank in the "
                                       "current epoch.")),
        compute(prometheus::BuildHistogram()
                    .Name("tagi_worker_step_compute_seconds")
                    .Help("Time of each training step without the part of its all-reduce "
                          "it waited for.")
                    .Register(*registry)),
        allreduce(prometheus::BuildHistogram()
                      .Name("tagi_worker_step_allreduce_seconds")
                      .Help("Time of each step's all-reduce of the packed deltas (with "
                            "buckets: in the collective, partly behind the backward pass).")
                      .Register(*registry)),
        allreduce_wait(prometheus::BuildHistogram()
                           .Name("tagi_worker_step_allreduce_wait_seconds")
                           .Help("The part of each step's all-reduce the step waited for "
                                 "after its backward pass (not hidden by the overlap).")
                           .Register(*registry)),
        allreduce_bytes(prometheus::BuildCounter()
                            .Name("tagi_worker_allreduce_bytes_total")
                            .Help("Bytes all-reduced by this rank (its buffer size per call).")
                            .Register(*registry)),
        steps(prometheus::BuildCounter()
                  .Name("tagi_worker_steps_total")
                  .Help("Training steps completed by this rank.")
                  .Register(*registry)),
        epoch(GaugeFamily(*registry, "tagi_worker_epoch",
                          "Number (1-based) of the last finished epoch; 0 before the first.")),
        connected(GaugeFamily(*registry, "tagi_worker_coordinator_connected",
                              "1 while the session stream to the coordinator is open and "
                              "heard, else 0.")
                      .Add({})) {
    for (size_t i = 0; i < kNumEpochGauges; ++i) {
      epoch_families[i] = &GaugeFamily(*registry, kEpochGauges[i].name, kEpochGauges[i].help);
    }
  }

  template <typename T>
  static void Drop(Family<T>& family, T*& metric) {
    if (metric != nullptr) family.Remove(metric);
    metric = nullptr;
  }
  void DropSeries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Drop(samples_per_second, series.samples_per_second);
    Drop(compute, series.compute);
    Drop(allreduce, series.allreduce);
    Drop(allreduce_wait, series.allreduce_wait);
    Drop(allreduce_bytes, series.allreduce_bytes);
    Drop(steps, series.steps);
    Drop(epoch, series.epoch);
    for (size_t i = 0; i < kNumEpochGauges; ++i) {
      Drop(*epoch_families[i], series.epoch_gauges[i]);
    }
  }

  absl::Mutex mu;
  // Shared with the endpoint, which holds a weak pointer to it.
  const std::shared_ptr<prometheus::Registry> registry;
  Family<Gauge>& samples_per_second;
  Family<Histogram>& compute;
  Family<Histogram>& allreduce;
  Family<Histogram>& allreduce_wait;
  Family<Counter>& allreduce_bytes;
  Family<Counter>& steps;
  Family<Gauge>& epoch;
  std::array<Family<Gauge>*, kNumEpochGauges> epoch_families{};  // as kEpochGauges
  Gauge& connected;
  bool is_connected ABSL_GUARDED_BY(mu) = false;
  prometheus::Labels labels ABSL_GUARDED_BY(mu);
  bool classification ABSL_GUARDED_BY(mu) = false;
  Series series ABSL_GUARDED_BY(mu);
};

WorkerMetrics::WorkerMetrics() : state_(std::make_unique<WorkerMetricsState>()) {}
WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::StartJob(const std::string& job, uint32_t rank, const std::string& worker,
                             bool classification) {
  WorkerMetricsState& s = *state_;
  absl::MutexLock lock(&s.mu);
  s.DropSeries();
  s.labels = {{"job", job}, {"rank", absl::StrCat(rank)}, {"worker", worker}};
  s.classification = classification;
  s.series.samples_per_second = &s.samples_per_second.Add(s.labels);
  s.series.compute = &s.compute.Add(s.labels, kStepBuckets);
  s.series.allreduce = &s.allreduce.Add(s.labels, kStepBuckets);
  s.series.allreduce_wait = &s.allreduce_wait.Add(s.labels, kStepBuckets);
  s.series.allreduce_bytes = &s.allreduce_bytes.Add(s.labels);
  s.series.steps = &s.steps.Add(s.labels);
  s.series.epoch = &s.epoch.Add(s.labels);
}

void WorkerMetrics::RecordStep(const StepTimings& step, double samples_per_second) {
  WorkerMetricsState& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (s.series.steps == nullptr) return;
  s.series.samples_per_second->Set(samples_per_second);
  s.series.compute->Observe(std::max(0.0, step.step_seconds - step.allreduce_wait_seconds));
  s.series.allreduce->Observe(step.allreduce_seconds);
  s.series.allreduce_wait->Observe(step.allreduce_wait_seconds);
  s.series.allreduce_bytes->Increment(static_cast<double>(step.allreduce_bytes));
  s.series.steps->Increment();
}

void WorkerMetrics::RecordEpoch(const EpochMetrics& m) {
  WorkerMetricsState& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (s.series.epoch == nullptr) return;
  s.series.epoch->Set(static_cast<double>(m.epoch + 1));
  const EpochJobs kind = s.classification ? EpochJobs::kClassification : EpochJobs::kRegression;
  for (size_t i = 0; i < kNumEpochGauges; ++i) {
    const EpochGauge& g = kEpochGauges[i];
    if (g.jobs != EpochJobs::kAll && g.jobs != kind) continue;
    Gauge*& series = s.series.epoch_gauges[i];
    if (series == nullptr) series = &s.epoch_families[i]->Add(s.labels);
    series->Set(g.value(m));
  }
}

void WorkerMetrics::SetCoordinatorConnected(bool connected) {
  WorkerMetricsState& s = *state_;
  absl::MutexLock lock(&s.mu);
  s.is_connected = connected;
  s.connected.Set(connected ? 1.0 : 0.0);
}

bool WorkerMetrics::coordinator_connected() {
  WorkerMetricsState& s = *state_;
  absl::MutexLock lock(&s.mu);
  return s.is_connected;
}

std::string WorkerMetrics::Scrape() {
  return prometheus::TextSerializer().Serialize(state_->registry->Collect());
}

// Served by common/http_server (libmicrohttpd) rather than prometheus-cpp's
// Exposer: CivetWeb runs its threads on fixed 100 KiB stacks, which glibc
// shares with the static TLS of every loaded library; with the CUDA runtime
// and NCCL loaded (GPU builds) a scrape overflowed them (SIGSEGV). One
// event-loop thread with an ordinary stack serves every scraper, and no
// client can hold it (http_server.h).
struct MetricsEndpoint::Server {
  explicit Server(WorkerMetrics& metrics)
      : http(Options(),
             [&metrics](const HttpRequest& req, HttpResponse& res) {
               Answer(metrics, req, res);
               return true;  // every request is answered before a body is read
             },
             [&metrics](const HttpRequest& req, HttpResponse& res) { Answer(metrics, req, res); },
             [](int status, const absl::Status& st, HttpResponse& res) {
               res.status = status;
               res.SetContent(absl::StrCat(st.message(), "\n"), "text/plain; charset=utf-8");
             },
             clock) {}

  static HttpServerOptions Options() {
    HttpServerOptions options;
    options.threads = 1;
    options.max_connections = 64;
    options.max_connections_per_client = 16;
    options.max_body_bytes = 0;
    return options;
  }

  static void Answer(WorkerMetrics& metrics, const HttpRequest& req, HttpResponse& res) {
    constexpr char kText[] = "text/plain; charset=utf-8";
    const bool known = req.path == "/metrics" || req.path == "/healthz" || req.path == "/readyz";
    if (!known) {
      res.status = 404;
      res.SetContent("only /metrics, /healthz and /readyz are served here\n", kText);
    } else if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.SetHeader("Allow", "GET, HEAD");
      res.SetContent(absl::StrCat("GET ", req.path, "\n"), kText);
    } else if (req.path == "/healthz") {
      res.SetContent("ok\n", kText);
    } else if (req.path == "/readyz") {
      const bool ready = metrics.coordinator_connected();
      res.status = ready ? 200 : 503;
      res.SetContent(ready ? "ok\n" : "not connected to the coordinator\n", kText);
    } else {
      res.SetContent(metrics.Scrape(), "text/plain; version=0.0.4");
    }
  }

  RealClock clock;  // declared before http, which times deadlines with it
  HttpServer http;
};

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Server> server, int port)
    : server_(std::move(server)), port_(port) {}
MetricsEndpoint::~MetricsEndpoint() = default;

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                        WorkerMetrics& metrics) {
  auto server = std::make_unique<Server>(metrics);
  auto port = server->http.Bind(address);
  if (!port.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", port.status().message()));
  }
  if (auto st = server->http.Start(); !st.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", st.message()));
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(server), *port));
}

}  // namespace tagi
