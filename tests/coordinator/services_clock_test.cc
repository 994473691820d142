// The Cluster service in process, on a FakeClock: the first-message deadline
// of a session stream and the keep-alives are timed by the coordinator's
// clock, so they are tested without waiting ten real seconds.
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/protocol.h"
#include "common/worker_credentials.h"
#include "coordinator/coordinator.h"
#include "coordinator/services.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tagi/v1/cluster.grpc.pb.h"

namespace tagi::coordinator {
namespace {

class ServicesOnAFakeClock : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.world = 1;
    coordinator_ = std::make_unique<Coordinator>(o, clock_);
    service_ = std::make_unique<ClusterService>(*coordinator_, kKeepAlive);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = tagi::v1::Cluster::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (service_ != nullptr) service_->Shutdown();
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata(kProtocolMetadataKey, kProtocolVersion);
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));  // real: a bound
    return ctx;
  }

  void RegisterWorker(tagi::v1::RegisterResponse& reg) {
    auto ctx = Context();
    ASSERT_TRUE(stub_->Register(ctx.get(), tagi::v1::RegisterRequest(), &reg).ok());
  }
  // A context with the worker's credentials (a session stream needs them).
  std::unique_ptr<grpc::ClientContext> WorkerContext(const tagi::v1::RegisterResponse& reg) {
    auto ctx = Context();
    ctx->AddMetadata(kWorkerIdMetadataKey, reg.worker_id());
    ctx->AddMetadata(kWorkerSecretMetadataKey, reg.secret());
    return ctx;
  }

  // Advances the clock by `d` once the keep-alive ticker waits on it again
  // (a wait begun after the previous advance, its deadline fixed), so that
  // the ticker sees every advance as one interval.
  void TickerAdvance(absl::Duration d) {
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (clock_.waits_begun() <= begun_ && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_GT(clock_.waits_begun(), begun_) << "the keep-alive ticker stopped waiting";
    begun_ = clock_.waits_begun();
    clock_.Advance(d);
  }

  static constexpr absl::Duration kKeepAlive = absl::Seconds(1);
  int64_t begun_ = 0;
  FakeClock clock_{absl::FromUnixSeconds(1'700'000'000)};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<ClusterService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<tagi::v1::Cluster::Stub> stub_;
  int port_ = 0;
};

TEST_F(ServicesOnAFakeClock, AStreamWithoutAFirstMessageEndsAtItsDeadlineOnTheCoordinatorsClock) {
  tagi::v1::RegisterResponse reg;
  ASSERT_NO_FATAL_FAILURE(RegisterWorker(reg));
  auto ctx = WorkerContext(reg);
  auto stream = stub_->Session(ctx.get());
  absl::Notification ended;
  grpc::Status status;
  std::thread reader([&] {
    tagi::v1::SessionDirective d;
    while (stream->Read(&d)) {
    }
    status = stream->Finish();
    ended.Notify();
  });
  // Almost the whole deadline on the clock, and real time besides: open.
  const absl::Duration deadline = ClusterService::kFirstMessageTimeout;
  for (absl::Duration t = absl::ZeroDuration(); t + kKeepAlive < deadline; t += kKeepAlive) {
    ASSERT_NO_FATAL_FAILURE(TickerAdvance(kKeepAlive));
  }
  EXPECT_FALSE(ended.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  // Past it: the ticker ends the stream.
  ASSERT_NO_FATAL_FAILURE(TickerAdvance(2 * kKeepAlive));
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  reader.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_NE(status.error_message().find("no first session message in time"), std::string::npos)
      << status.error_message();
}

TEST_F(ServicesOnAFakeClock, AnOpenSessionGetsAKeepAliveEveryIntervalOfTheClock) {
  tagi::v1::RegisterResponse reg;
  ASSERT_NO_FATAL_FAILURE(RegisterWorker(reg));
  auto ctx = WorkerContext(reg);
  auto stream = stub_->Session(ctx.get());
  tagi::v1::SessionMessage first;
  first.set_worker_id(reg.worker_id());
  first.set_hostname("fake-clock-host");
  ASSERT_TRUE(stream->Write(first));
  // No time passes: no keep-alive comes, however long we wait for real.
  // Then each interval of the clock brings one.
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(TickerAdvance(kKeepAlive));
    tagi::v1::SessionDirective d;
    ASSERT_TRUE(stream->Read(&d));
    EXPECT_EQ(d.directive(), tagi::v1::CONTINUE);
  }
  // Well past the first-message deadline: an opened stream stays.
  ASSERT_NO_FATAL_FAILURE(TickerAdvance(ClusterService::kFirstMessageTimeout));
  tagi::v1::SessionDirective d;
  ASSERT_TRUE(stream->Read(&d));
  stream->WritesDone();
  while (stream->Read(&d)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace tagi::coordinator
