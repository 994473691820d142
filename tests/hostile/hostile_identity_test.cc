// Worker identity (issue 31): a client that reaches the cluster port but
// holds no worker's credentials, or holds only its own, cannot act as
// another worker. The attacker is this test speaking the real Cluster
// protocol to a real tagi-coordinator while a real tagi-worker trains. On
// the main of before, its forged FinishJob(ok=false) FAILED the running job
// and a Session naming w-18446744073709551615 wrapped the id counter.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/protocol.h"
#include "common/worker_credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tests/service/service_cluster.h"
#include "tests/testing/worker_call.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<grpc::ClientContext> Context(const std::string& id = "",
                                             const std::string& secret = "") {
  return WorkerCallContext(id, secret);
}

class HostileIdentityTest : public ServiceTest {};

TEST_F(HostileIdentityTest, ForgedWorkerCallsNeitherFailNorFinishARunningJob) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker();
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  ToyJob toy;
  toy.train_size = 50000;
  toy.epochs = 400;  // several seconds: the attack lands while it trains
  const std::string id = Submit(WriteJob("toy.json", ToyJobJson(toy)));
  ASSERT_FALSE(id.empty());
  const auto running = WaitForJob(
      id, [](const tagi::v1::Job& j) { return j.state() == tagi::v1::RUNNING; },
      absl::Seconds(30));
  ASSERT_TRUE(running.has_value() && running->state() == tagi::v1::RUNNING);
  const std::string victim = running->workers(0);
  const uint64_t gen = running->generation();

  auto stub = tagi::v1::Cluster::NewStub(
      grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  // The attacker registers: it holds credentials, its own.
  tagi::v1::RegisterResponse own;
  ASSERT_TRUE(stub->Register(Context().get(), tagi::v1::RegisterRequest(), &own).ok());
  ASSERT_NE(own.worker_id(), victim);

  tagi::v1::FinishJobRequest fail;
  fail.set_worker_id(victim);
  fail.set_job_id(id);
  fail.set_generation(gen);
  fail.set_rank(0);
  fail.set_ok(false);
  fail.set_reason("forged");
  tagi::v1::FinishJobResponse ignored;
  // No credentials, a made-up secret, the attacker's own credentials.
  grpc::Status st = stub->FinishJob(Context().get(), fail, &ignored);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  st = stub->FinishJob(Context(victim, std::string(64, '0')).get(), fail, &ignored);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  st = stub->FinishJob(Context(own.worker_id(), own.secret()).get(), fail, &ignored);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr(victim));

  // A model of text "uploaded" for the victim, and a forged success.
  {
    tagi::v1::UploadModelResponse resp;
    auto ctx = Context(own.worker_id(), own.secret());
    auto writer = stub->UploadModel(ctx.get(), &resp);
    tagi::v1::UploadModelRequest first;
    first.set_worker_id(victim);
    first.set_job_id(id);
    first.set_generation(gen);
    first.set_total_bytes(11);
    first.set_data("not a model");
    writer->Write(first);
    writer->WritesDone();
    st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  // The job's store: only its ranks may write there.
  tagi::v1::StoreSetRequest set;
  set.set_job_id(id);
  set.set_generation(gen);
  set.set_key("ring/0");
  set.set_value("127.0.0.1:1");
  tagi::v1::StoreSetResponse set_resp;
  st = stub->StoreSet(Context().get(), set, &set_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  st = stub->StoreSet(Context(own.worker_id(), own.secret()).get(), set, &set_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();

  // A session naming the largest id, and one naming the victim.
  for (const std::string& name : {std::string("w-18446744073709551615"), victim}) {
    auto ctx = Context();
    auto stream = stub->Session(ctx.get());
    tagi::v1::SessionMessage hello;
    hello.set_worker_id(name);
    stream->Write(hello);
    tagi::v1::SessionDirective d;
    EXPECT_FALSE(stream->Read(&d)) << name;
    st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name << ": " << st.error_message();
  }
  {
    // With the attacker's credentials, naming the victim.
    auto ctx = Context(own.worker_id(), own.secret());
    auto stream = stub->Session(ctx.get());
    tagi::v1::SessionMessage hello;
    hello.set_worker_id(victim);
    stream->Write(hello);
    tagi::v1::SessionDirective d;
    EXPECT_FALSE(stream->Read(&d));
    st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }

  const auto mid = GetJob(id);
  ASSERT_TRUE(mid.has_value());
  EXPECT_NE(mid->state(), tagi::v1::FAILED) << mid->reason();
  const auto done = WaitForJob(
      id,
      [](const tagi::v1::Job& j) {
        return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED;
      },
      absl::Seconds(120));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
  EXPECT_EQ(done->restarts(), 0u);

  // A new worker gets an id of its own: the counter did not wrap, and no
  // id is handed out twice.
  // (The attacker's registration is listed too, GONE without a session.)
  StartWorker();
  std::vector<WorkerRow> rows;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    rows = Workers();
    int idle = 0;
    for (const WorkerRow& w : rows) idle += w.state == "IDLE";
    if (rows.size() == 3 && idle == 2) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(rows.size(), 3u);
  std::set<std::string> ids;
  for (const WorkerRow& w : rows) {
    EXPECT_NE(w.id, "w-0");
    EXPECT_TRUE(ids.insert(w.id).second) << w.id << " listed twice";
  }
}

}  // namespace
}  // namespace tagi::testing
