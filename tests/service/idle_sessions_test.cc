// The asynchronous Cluster service against many idle workers (issue 16):
// this test opens 240 session streams and long polls the way tagi-worker
// does (Register, Session with heartbeats, Rendezvous) and checks that
// the real coordinator's thread count does not grow with them, that every
// stream gets its keep-alives in time, and that a job placed on them is
// announced to every poll at once.
#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/worker_credentials.h"
#include "gtest/gtest.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tests/service/service_cluster.h"
#include "tests/testing/proc_status.h"

namespace tagi::testing {
namespace {

// A worker's session: the first message, then a heartbeat per Heartbeat();
// counts the directives (acks and keep-alives) the coordinator sends.
class Session final
    : public grpc::ClientBidiReactor<tagi::v1::SessionMessage, tagi::v1::SessionDirective> {
 public:
  Session(tagi::v1::Cluster::Stub* stub, std::string id, const std::string& secret)
      : id_(std::move(id)), ctx_(MakeClientContext(absl::Minutes(5))) {
    ctx_->AddMetadata(kWorkerIdMetadataKey, id_);
    ctx_->AddMetadata(kWorkerSecretMetadataKey, secret);
    stub->async()->Session(ctx_.get(), this);
    out_.set_worker_id(id_);
    out_.set_hostname("sim");
    out_.set_device("cpu");
    writing_ = true;
    StartWrite(&out_);
    StartRead(&in_);
    StartCall();
  }
  void Heartbeat() {
    std::lock_guard<std::mutex> lock(mu_);
    if (writing_ || done_) return;
    writing_ = true;
    StartWrite(&out_);
  }
  void OnWriteDone(bool) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++received;
    StartRead(&in_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void Stop() {
    ctx_->TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  std::atomic<int> received{0};

 private:
  const std::string id_;
  const std::unique_ptr<grpc::ClientContext> ctx_;
  tagi::v1::SessionMessage out_;
  tagi::v1::SessionDirective in_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false;
  bool done_ = false;
};

class IdleSessionsTest : public ServiceTest {};

TEST_F(IdleSessionsTest, ThreadsDoNotGrowWithSessionsAndPollsAndEveryPollHearsOfAJob) {
  constexpr int kWorkers = 240;
  StartCoordinator(kWorkers, {"--heartbeat-interval", "200ms", "--heartbeat-timeout", "3s"});
  const pid_t pid = coordinator().Pid();
  auto stub = tagi::v1::Cluster::NewStub(
      grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  const int64_t before = ThreadCount(pid);
  ASSERT_GT(before, 0);

  std::vector<std::string> ids;
  std::map<std::string, std::string> secrets;
  for (int i = 0; i < kWorkers; ++i) {
    const auto ctx = MakeClientContext(absl::Seconds(10));
    tagi::v1::RegisterRequest req;
    req.set_hostname(absl::StrCat("sim-", i));
    req.set_device("cpu");
    tagi::v1::RegisterResponse resp;
    ASSERT_TRUE(stub->Register(ctx.get(), req, &resp).ok());
    ids.push_back(resp.worker_id());
    secrets[resp.worker_id()] = resp.secret();
  }
  std::vector<std::unique_ptr<Session>> sessions;
  for (const std::string& id : ids) {
    sessions.push_back(std::make_unique<Session>(stub.get(), id, secrets[id]));
  }

  // Every worker long-polls Rendezvous (30 s) while heartbeating.
  struct Poll {
    std::unique_ptr<grpc::ClientContext> ctx = MakeClientContext(absl::Seconds(60));
    tagi::v1::RendezvousRequest req;
    tagi::v1::RendezvousResponse resp;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Poll>> polls;
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0;
  for (const std::string& id : ids) {
    auto p = std::make_unique<Poll>();
    p->req.set_worker_id(id);
    p->req.set_wait_ms(30000);
    p->ctx->AddMetadata(kWorkerIdMetadataKey, id);
    p->ctx->AddMetadata(kWorkerSecretMetadataKey, secrets[id]);
    Poll* raw = p.get();
    stub->async()->Rendezvous(raw->ctx.get(), &raw->req, &raw->resp, [&, raw](grpc::Status st) {
      std::lock_guard<std::mutex> lock(mu);
      raw->status = st;
      ++answered;
      cv.notify_all();
    });
    polls.push_back(std::move(p));
  }
  // Two seconds of heartbeats every 200 ms.
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while (absl::Now() < until) {
    for (auto& s : sessions) s->Heartbeat();
    absl::SleepFor(absl::Milliseconds(200));
  }
  const int64_t during = ThreadCount(pid);
  EXPECT_LE(during, before + 8) << kWorkers << " sessions and polls took " << during - before
                                << " threads (a thread per stream would take hundreds)";
  int starved = 0;
  for (auto& s : sessions) starved += s->received.load() < 4 ? 1 : 0;  // ack + keep-alives
  EXPECT_EQ(starved, 0) << "sessions that got fewer than 4 messages in 2 s";
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(answered, 0) << "a poll ended before its wait with no job";
  }

  // A job of every worker answers every poll at once, with its assignment.
  const std::string job = WriteJob("all.json", R"({
  "name": "all", "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 11}],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST", "trainLimit": 100, "testLimit": 10},
  "noise": {"sigmaV": 1.0}, "batchSize": 4, "epochs": 1, "worldSize": 240, "device": "cpu"
})");
  const absl::Time submitted = absl::Now();
  ASSERT_FALSE(Submit(job).empty());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return answered == kWorkers; }))
        << answered << " of " << kWorkers << " polls answered";
  }
  EXPECT_LT(absl::Now() - submitted, absl::Seconds(10));
  int assigned = 0;
  for (auto& p : polls) assigned += p->status.ok() && p->resp.assigned() ? 1 : 0;
  EXPECT_EQ(assigned, kWorkers);
  for (auto& s : sessions) s->Stop();
}

}  // namespace
}  // namespace tagi::testing
