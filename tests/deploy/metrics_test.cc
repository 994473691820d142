// Unit tests of the coordinator's and the worker's Prometheus metrics: what
// each scrape contains, which series go away, and the worker's endpoint.
// The coordinator runs on a FakeClock; nothing sleeps.
#include "coordinator/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/coordinator_harness.h"
#include "worker/metrics.h"

namespace tagi {
namespace {

// The value of the series written exactly as `series` (name and labels in
// the exposition's order), or nullopt when the scrape does not have it.
std::optional<double> Value(const std::string& scrape, const std::string& series) {
  std::istringstream in(scrape);
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

using coordinator::CoordinatorMetrics;
using coordinator::test::CoordinatorTest;

class CoordinatorMetricsTest : public CoordinatorTest {
 protected:
  absl::Status ReportRendezvous(const std::string& job, const std::string& worker, double seconds,
                                uint64_t gen = 1) {
    tagi::v1::ProgressReport report;
    report.set_worker_id(worker);
    report.set_job_id(job);
    report.set_generation(gen);
    report.set_rank(0);
    report.mutable_progress()->set_global_step(25);
    report.mutable_progress()->set_total_steps(100);
    report.mutable_progress()->set_samples_per_second(1234.5);
    report.mutable_progress()->set_rendezvous_seconds(seconds);
    return coord().ReportProgress(report).status();
  }
};

TEST_F(CoordinatorMetricsTest, CountsWorkersAndJobsByStateWithEveryStatePresent) {
  Start(2);
  CoordinatorMetrics metrics(coord(), clock_);
  std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_workers{state="idle"})"), 0);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_workers{state="gone"})"), 0);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_jobs{state="cancelled"})"), 0);

  RegisterN(3);
  Submit(2);  // starts on two of the three workers
  Submit(2);  // waits
  s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_workers{state="idle"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_workers{state="busy"})"), 2);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_jobs{state="running"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_jobs{state="pending"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_generation{job="job-1"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_restarts_total{job="job-1"})"), 0);
  // A pending job has no per-job series.
  EXPECT_FALSE(Value(s, R"(tagi_coordinator_job_generation{job="job-2"})").has_value());
}

TEST_F(CoordinatorMetricsTest, ReportsProgressThroughputAndHeartbeatAge) {
  Start(2);
  CoordinatorMetrics metrics(coord(), clock_);
  RegisterN(2);
  const std::string job = Submit(2);
  ASSERT_TRUE(ReportRendezvous(job, GetJob(job).workers(0), 0.5).ok());
  clock_.Advance(absl::Milliseconds(2500));
  const std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_progress_ratio{job="job-1"})"), 0.25);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_samples_per_second{job="job-1"})"), 1234.5);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_world_size{job="job-1"})"), 2);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_resizes_total{job="job-1"})"), 0);
  // Rank 0 was last heard from with its report, 2.5 s ago.
  const std::string rank0 = GetJob(job).workers(0);
  EXPECT_EQ(Value(s, absl::StrCat(R"(tagi_coordinator_worker_heartbeat_age_seconds{worker=")",
                                  rank0, "\"}")),
            2.5);
}

TEST_F(CoordinatorMetricsTest, ObservesEachAttemptsRendezvousOnce) {
  Start(2);
  CoordinatorMetrics metrics(coord(), clock_);
  RegisterN(2);
  const std::string job = Submit(2);
  const std::string rank0 = GetJob(job).workers(0);
  EXPECT_EQ(Value(metrics.Scrape(), "tagi_coordinator_rendezvous_seconds_count"), 0);
  ASSERT_TRUE(ReportRendezvous(job, rank0, 0.75).ok());
  metrics.Scrape();
  ASSERT_TRUE(ReportRendezvous(job, rank0, 0.75).ok());
  const std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, "tagi_coordinator_rendezvous_seconds_count"), 1);
  EXPECT_EQ(Value(s, "tagi_coordinator_rendezvous_seconds_sum"), 0.75);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_rendezvous_seconds_bucket{le="1"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_rendezvous_seconds_bucket{le="0.5"})"), 0);
}

TEST_F(CoordinatorMetricsTest, ObservesTheRendezvousOfAJobShorterThanAProgressInterval) {
  Start(1);
  CoordinatorMetrics metrics(coord(), clock_);
  const std::string w = Register();
  const std::string job = Submit(1);
  ASSERT_TRUE(Upload(job, w).ok());
  // No progress report came before the end: the time rides in FinishJob.
  tagi::v1::FinishJobRequest fin;
  fin.set_worker_id(w);
  fin.set_job_id(job);
  fin.set_generation(1);
  fin.set_rank(0);
  fin.set_ok(true);
  fin.mutable_progress()->set_rendezvous_seconds(0.3);
  ASSERT_TRUE(coord().FinishJob(fin).ok());
  const std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_jobs{state="succeeded"})"), 1);
  EXPECT_EQ(Value(s, "tagi_coordinator_rendezvous_seconds_count"), 1);
  EXPECT_EQ(Value(s, "tagi_coordinator_rendezvous_seconds_sum"), 0.3);
}

TEST_F(CoordinatorMetricsTest, KeepsOnlyTheLastEndedJobsSeries) {
  Start(2);
  CoordinatorMetrics metrics(coord(), clock_);
  RegisterN(2);
  const std::string first = Submit(2);
  Complete(first);
  std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_jobs{state="succeeded"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_progress_ratio{job="job-1"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_samples_per_second{job="job-1"})"), 0);

  clock_.Advance(absl::Seconds(1));
  const std::string second = Submit(2);
  s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_generation{job="job-2"})"), 1);
  EXPECT_EQ(Value(s, R"(tagi_coordinator_job_generation{job="job-1"})"), 1);  // last ended
  ASSERT_TRUE(coord().Cancel(second).ok());
  s = metrics.Scrape();
  EXPECT_TRUE(Value(s, R"(tagi_coordinator_job_generation{job="job-2"})").has_value());
  EXPECT_FALSE(Value(s, R"(tagi_coordinator_job_generation{job="job-1"})").has_value());
}

TEST_F(CoordinatorMetricsTest, GoneWorkersHaveNoHeartbeatSeries) {
  Start(1);
  CoordinatorMetrics metrics(coord(), clock_);
  const std::string w = Register();
  clock_.Advance(absl::Seconds(10));  // past the harness's 3 s worker timeout
  coord().Tick();
  const std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, R"(tagi_coordinator_workers{state="gone"})"), 1);
  EXPECT_FALSE(absl::StrContains(s, absl::StrCat("worker=\"", w, "\"")));
}

TEST(WorkerMetrics, RecordsStepsAndEpochsUnderTheJobsLabels) {
  WorkerMetrics metrics;
  metrics.StartJob("job-7", 1, "w-3", /*classification=*/true);
  const std::string labels = R"({job="job-7",rank="1",worker="w-3"})";
  EXPECT_EQ(Value(metrics.Scrape(), "tagi_worker_epoch" + labels), 0);
  EXPECT_FALSE(Value(metrics.Scrape(), "tagi_worker_test_accuracy" + labels).has_value());

  // An overlapped step: 3 ms in the collective, of which 1 ms was waited
  // for after the backward.
  StepTimings step{.step_seconds = 0.004,
                   .allreduce_seconds = 0.003,
                   .allreduce_wait_seconds = 0.001,
                   .allreduce_bytes = 1000};
  metrics.RecordStep(step, 500.0);
  metrics.RecordStep(step, 600.0);
  EpochMetrics epoch;
  epoch.epoch = 0;
  epoch.train_accuracy = 0.8;
  epoch.test.accuracy = 0.85;
  epoch.test.log_likelihood = -0.48;
  epoch.test.nll = 0.48;
  epoch.test.ece = 0.03;
  epoch.test.brier = 0.21;
  epoch.sigma_v = 1.0f;
  metrics.RecordEpoch(epoch);

  const std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, "tagi_worker_test_ece" + labels), 0.03);
  EXPECT_EQ(Value(s, "tagi_worker_test_brier" + labels), 0.21);
  EXPECT_EQ(Value(s, "tagi_worker_test_nll" + labels), 0.48);
  EXPECT_FALSE(Value(s, "tagi_worker_test_coverage_95" + labels).has_value());  // regression only
  EXPECT_EQ(Value(s, "tagi_worker_steps_total" + labels), 2);
  EXPECT_EQ(Value(s, "tagi_worker_allreduce_bytes_total" + labels), 2000);
  EXPECT_EQ(Value(s, "tagi_worker_samples_per_second" + labels), 600);
  EXPECT_EQ(Value(s, "tagi_worker_step_compute_seconds_count" + labels), 2);
  EXPECT_NEAR(*Value(s, "tagi_worker_step_compute_seconds_sum" + labels), 0.006, 1e-12);
  EXPECT_NEAR(*Value(s, "tagi_worker_step_allreduce_seconds_sum" + labels), 0.006, 1e-12);
  EXPECT_NEAR(*Value(s, "tagi_worker_step_allreduce_wait_seconds_sum" + labels), 0.002, 1e-12);
  EXPECT_EQ(Value(s, "tagi_worker_epoch" + labels), 1);
  EXPECT_EQ(Value(s, "tagi_worker_test_accuracy" + labels), 0.85);
  EXPECT_EQ(Value(s, "tagi_worker_train_accuracy" + labels), 0.8);
  EXPECT_EQ(Value(s, "tagi_worker_test_log_likelihood" + labels), -0.48);
  EXPECT_EQ(Value(s, "tagi_worker_sigma_v" + labels), 1);
  EXPECT_FALSE(Value(s, "tagi_worker_test_rmse" + labels).has_value());  // classification
}

TEST(WorkerMetrics, RegressionEpochsExportIntervalCoverage) {
  WorkerMetrics metrics;
  metrics.StartJob("job-8", 0, "w-1", /*classification=*/false);
  const std::string labels = R"({job="job-8",rank="0",worker="w-1"})";
  EpochMetrics epoch;
  epoch.test.rmse = 0.4;
  epoch.test.coverage_68 = 0.66;
  epoch.test.coverage_95 = 0.94;
  epoch.test.mean_std = 0.38;
  metrics.RecordEpoch(epoch);
  const std::string s = metrics.Scrape();
  EXPECT_EQ(Value(s, "tagi_worker_test_coverage_68" + labels), 0.66);
  EXPECT_EQ(Value(s, "tagi_worker_test_coverage_95" + labels), 0.94);
  EXPECT_EQ(Value(s, "tagi_worker_test_predictive_std" + labels), 0.38);
  EXPECT_FALSE(Value(s, "tagi_worker_test_ece" + labels).has_value());  // classification only
}

TEST(WorkerMetrics, NextJobReplacesThePreviousJobsSeries) {
  WorkerMetrics metrics;
  metrics.StartJob("job-1", 0, "w-1", /*classification=*/false);
  metrics.RecordStep({}, 1.0);
  EpochMetrics epoch;
  epoch.test.rmse = 3.1;
  metrics.RecordEpoch(epoch);
  EXPECT_TRUE(absl::StrContains(metrics.Scrape(), R"(tagi_worker_test_rmse{job="job-1")"));

  metrics.StartJob("job-2", 1, "w-1", /*classification=*/true);
  const std::string s = metrics.Scrape();
  EXPECT_FALSE(absl::StrContains(s, R"(job="job-1")")) << s;
  EXPECT_EQ(Value(s, R"(tagi_worker_steps_total{job="job-2",rank="1",worker="w-1"})"), 0);
}

// GET http://127.0.0.1:port<path> with a plain socket; the response, or
// an empty string.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
    }
  }
  ::close(fd);
  return out;
}
std::string HttpGetMetrics(int port) { return HttpGet(port, "/metrics"); }

TEST(MetricsEndpoint, ServesTheMetricsOnAFreePortAndRefusesABusyOne) {
  WorkerMetrics metrics;
  metrics.StartJob("job-1", 0, "w-1", /*classification=*/true);
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", metrics);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  const std::string response = HttpGetMetrics((*endpoint)->port());
  EXPECT_TRUE(absl::StrContains(response, " 200 ")) << response;
  EXPECT_TRUE(absl::StrContains(response, R"(tagi_worker_steps_total{job="job-1")")) << response;

  auto second = MetricsEndpoint::Start(absl::StrCat("127.0.0.1:", (*endpoint)->port()), metrics);
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
}

// Liveness answers while the process serves; readiness follows the
// session to the coordinator, and the gauge with it.
TEST(MetricsEndpoint, HealthzIsLiveAndReadyzFollowsTheCoordinatorSession) {
  WorkerMetrics metrics;
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", metrics);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  EXPECT_TRUE(absl::StrContains(HttpGet(port, "/healthz"), " 200 "));
  std::string ready = HttpGet(port, "/readyz");
  EXPECT_TRUE(absl::StrContains(ready, " 503 ")) << ready;
  EXPECT_TRUE(absl::StrContains(ready, "not connected to the coordinator")) << ready;
  EXPECT_EQ(Value(metrics.Scrape(), "tagi_worker_coordinator_connected"), 0);
  metrics.SetCoordinatorConnected(true);
  ready = HttpGet(port, "/readyz");
  EXPECT_TRUE(absl::StrContains(ready, " 200 ")) << ready;
  EXPECT_EQ(Value(metrics.Scrape(), "tagi_worker_coordinator_connected"), 1);
  metrics.SetCoordinatorConnected(false);
  EXPECT_TRUE(absl::StrContains(HttpGet(port, "/readyz"), " 503 "));
  EXPECT_TRUE(absl::StrContains(HttpGet(port, "/healthz"), " 200 "));
  const std::string other = HttpGet(port, "/other");
  EXPECT_TRUE(absl::StrContains(other, " 404 ")) << other;
  EXPECT_TRUE(absl::StrContains(other, "/healthz and /readyz")) << other;
}

TEST(MetricsEndpoint, AnswersWhileIdleConnectionsAreHeld) {
  // cpp-httplib gave each open connection a thread of a small pool; a few
  // idle connections silenced the endpoint. Now one event loop serves all.
  WorkerMetrics metrics;
  auto endpoint = MetricsEndpoint::Start("127.0.0.1:0", metrics);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>((*endpoint)->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::write(fd, "GET /met", 8), 8);  // a request that never ends
    idle.push_back(fd);
  }
  const absl::Time start = absl::Now();
  const std::string response = HttpGetMetrics((*endpoint)->port());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_TRUE(absl::StrContains(response, " 200 ")) << response;
  for (int fd : idle) ::close(fd);
}

}  // namespace
}  // namespace tagi
