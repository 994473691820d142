// The gRPC side against hostile clients (issue 14): API clients cannot take
// the streams training needs, and uploads are checked before their bytes
// are buffered. Real tagi-coordinator and tagi-worker processes on
// loopback; the hostile client is this test, speaking the real protocol.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/protocol.h"
#include "common/worker_credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tagi/v1/jobs.grpc.pb.h"
#include "tests/hostile/raw_http.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

// A few seconds of training on two workers with a snapshot every 20 steps,
// so that snapshot and model uploads happen while the API is flooded.
std::string SnapshottingJobJson() {
  return R"({
  "name": "flooded",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 64}, {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 64, "outFeatures": 11}
  ],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST", "trainLimit": 3000, "testLimit": 300},
  "init": {"method": "HE"}, "noise": {"sigmaV": 1.0},
  "batchSize": 16, "epochs": 3, "seed": 3, "reduction": "SUM", "worldSize": 2,
  "snapshotInterval": 20, "device": "cpu"
})";
}

// A channel of its own (not shared with other channels of the process), so
// that streams spread over several connections.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int i) {
  grpc::ChannelArguments args;
  args.SetInt("tagi.test.channel", i);
  args.SetMaxSendMessageSize(16 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void AddProtocol(grpc::ClientContext& ctx) {
  ctx.AddMetadata(kProtocolMetadataKey, kProtocolVersion);
}

class HostileStreamsTest : public ServiceTest {};

TEST_F(HostileStreamsTest, ThreeHundredWatchesFromTheWorkersHostLeaveTheJobUnharmed) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed (make deps)";
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const std::string id = Submit(WriteJob("flooded.json", SnapshottingJobJson()));
  ASSERT_FALSE(id.empty());

  // 300 watches from 127.0.0.1, the host the workers will connect from.
  constexpr int kWatches = 300;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 10; ++i) channels.push_back(OwnChannel(address(), i));
  absl::Mutex mu;
  std::vector<grpc::Status> ended;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(kWatches);
  std::vector<std::thread> watchers;
  for (int i = 0; i < kWatches; ++i) {
    contexts[i] = std::make_unique<grpc::ClientContext>();
    AddProtocol(*contexts[i]);
    contexts[i]->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(240));
    watchers.emplace_back([&, i] {
      auto stub = tagi::v1::Jobs::NewStub(channels[i % channels.size()]);
      tagi::v1::WatchJobRequest req;
      req.set_id(id);
      auto reader = stub->Watch(contexts[i].get(), req);
      tagi::v1::Job job;
      while (reader->Read(&job)) {
      }
      const grpc::Status st = reader->Finish();
      absl::MutexLock lock(&mu);
      ended.push_back(st);
    });
  }
  // The watches over the per-client limit (256) are refused at once; the
  // others stay open.
  auto refused = [&] {
    absl::MutexLock lock(&mu);
    return static_cast<int>(ended.size());
  };
  ASSERT_TRUE(WaitUntil([&] { return refused() >= kWatches - 256; }, absl::Seconds(60)));
  absl::SleepFor(absl::Milliseconds(500));
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(ended.size(), kWatches - 256u);
    for (const grpc::Status& st : ended) {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr("--max-streams-per-client"));
    }
  }

  // Now the workers come, from the same host, and train with snapshots.
  StartWorker();
  StartWorker();
  const auto job = WaitForJob(
      id, [](const tagi::v1::Job& j) {
        return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
               j.state() == tagi::v1::CANCELLED;
      },
      absl::Seconds(180));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state(), tagi::v1::SUCCEEDED) << job->reason();
  EXPECT_GT(job->snapshot_step(), 0u) << "snapshots were uploaded during the flood";
  EXPECT_TRUE(job->recoveries().empty()) << "a generation failed during the flood";
  for (auto& t : watchers) t.join();  // the open watches end with the job
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ended.size(), static_cast<size_t>(kWatches));
}

// Streams `total` bytes (announced in the first chunk) in 4 MiB chunks to
// an upload RPC until the server ends it; returns the final status and the
// bytes the client got to send.
template <typename Chunk, typename Response, typename Start>
grpc::Status FloodUpload(Start start, Chunk first, uint64_t total, uint64_t& sent,
                         const std::string& secret) {
  grpc::ClientContext ctx;
  AddProtocol(ctx);
  if (!secret.empty()) {
    ctx.AddMetadata(kWorkerIdMetadataKey, first.worker_id());
    ctx.AddMetadata(kWorkerSecretMetadataKey, secret);
  }
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  Response response;
  auto writer = start(&ctx, &response);
  const std::string block(4 << 20, 'z');
  first.set_total_bytes(total);
  first.set_data(block);
  sent = 0;
  bool open = writer->Write(first);
  while (open && sent < total) {
    sent += block.size();
    Chunk next;
    next.set_data(block);
    open = writer->Write(next);
  }
  writer->WritesDone();
  return writer->Finish();
}

// Uploads from a registered worker (valid credentials) for a job that does
// not exist, and the same without credentials: each refused before its
// bytes are read.
TEST_F(HostileStreamsTest, UploadsForAJobThatDoesNotExistAreRefusedBeforeTheirBytes) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const pid_t pid = coordinator().Pid();
  tagi::v1::RegisterResponse reg;
  {
    auto stub = tagi::v1::Cluster::NewStub(OwnChannel(address(), 9));
    grpc::ClientContext ctx;
    AddProtocol(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(stub->Register(&ctx, tagi::v1::RegisterRequest(), &reg).ok());
  }
  const int64_t peak_before = PeakRssKib(pid);
  constexpr uint64_t kAnnounced = uint64_t{1} << 30;  // 1 GiB each
  std::vector<std::thread> threads;
  absl::Mutex mu;
  std::vector<std::tuple<grpc::Status, uint64_t, bool>> results;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      auto stub = tagi::v1::Cluster::NewStub(OwnChannel(address(), i));
      uint64_t sent = 0;
      grpc::Status st;
      const std::string secret = i < 4 ? reg.secret() : "";
      if (i % 2 == 0) {
        tagi::v1::SnapshotChunk first;
        first.set_worker_id(reg.worker_id());
        first.set_job_id("job-404");
        first.set_generation(1);
        first.set_global_step(100);
        st = FloodUpload<tagi::v1::SnapshotChunk, tagi::v1::UploadSnapshotResponse>(
            [&](grpc::ClientContext* ctx, tagi::v1::UploadSnapshotResponse* resp) {
              return stub->UploadSnapshot(ctx, resp);
            },
            first, kAnnounced, sent, secret);
      } else {
        tagi::v1::UploadModelRequest first;
        first.set_worker_id(reg.worker_id());
        first.set_job_id("job-404");
        first.set_generation(1);
        st = FloodUpload<tagi::v1::UploadModelRequest, tagi::v1::UploadModelResponse>(
            [&](grpc::ClientContext* ctx, tagi::v1::UploadModelResponse* resp) {
              return stub->UploadModel(ctx, resp);
            },
            first, kAnnounced, sent, secret);
      }
      absl::MutexLock lock(&mu);
      results.emplace_back(st, sent, !secret.empty());
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (const auto& [st, sent, credentialed] : results) {
    EXPECT_FALSE(st.ok());
    if (credentialed) {
      EXPECT_THAT(st.error_message(), HasSubstr("job-404"));
    } else {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
    }
    EXPECT_LT(sent, uint64_t{128} << 20) << "the server kept reading a refused upload";
  }
  EXPECT_LT(seconds, 20.0);
  const int64_t growth = PeakRssKib(pid) - peak_before;
  EXPECT_LT(growth, 128 * 1024) << "peak RSS growth in KiB";
  std::printf("[figure] 6 uploads announcing 1 GiB for no job: refused in %.2f s, peak RSS +%lld "
              "KiB\n",
              seconds, static_cast<long long>(growth));
}

// Session streams that never say which worker they are (the first message)
// cost the asynchronous server a reactor each before any limiter counts
// them: at most --max-worker-streams are held, and each only until its
// first-message deadline.
TEST_F(HostileStreamsTest, SilentSessionStreamsAreBoundedAndEndAtTheirDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {"--max-worker-streams", "8"}));
  auto stub = tagi::v1::Cluster::NewStub(OwnChannel(address(), 0));
  // A registered worker's credentials: without them a stream is refused at
  // once (below).
  tagi::v1::RegisterResponse reg;
  {
    grpc::ClientContext ctx;
    AddProtocol(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(stub->Register(&ctx, tagi::v1::RegisterRequest(), &reg).ok());
  }
  {
    grpc::ClientContext ctx;
    AddProtocol(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->Session(&ctx);
    tagi::v1::SessionDirective d;
    EXPECT_FALSE(stream->Read(&d));
    const grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  }
  constexpr int kStreams = 9;
  std::vector<grpc::Status> ends(kStreams);
  std::vector<absl::Duration> took(kStreams);
  std::vector<std::thread> streams;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back([&, i] {
      grpc::ClientContext ctx;
      AddProtocol(ctx);
      ctx.AddMetadata(kWorkerIdMetadataKey, reg.worker_id());
      ctx.AddMetadata(kWorkerSecretMetadataKey, reg.secret());
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      auto stream = stub->Session(&ctx);
      tagi::v1::SessionDirective d;
      while (stream->Read(&d)) {
      }
      ends[static_cast<size_t>(i)] = stream->Finish();
      took[static_cast<size_t>(i)] = absl::Now() - start;
    });
    absl::SleepFor(absl::Milliseconds(50));  // in order: the ninth is over the bound
  }
  for (std::thread& t : streams) t.join();
  int refused = 0, timed_out = 0;
  for (int i = 0; i < kStreams; ++i) {
    const grpc::Status& st = ends[static_cast<size_t>(i)];
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_THAT(st.error_message(), HasSubstr("--max-worker-streams"));
      EXPECT_LT(took[static_cast<size_t>(i)], absl::Seconds(5));
    } else {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr("no first session message"));
      EXPECT_LT(took[static_cast<size_t>(i)], absl::Seconds(20));
      ++timed_out;
    }
  }
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(timed_out, kStreams - 1);
}

}  // namespace
}  // namespace tagi::testing
