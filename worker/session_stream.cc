#include "worker/session_stream.h"

#include <utility>

#include "common/grpc_util.h"

namespace tagi {
namespace {

class GrpcSessionStream final : public SessionStream {
 public:
  GrpcSessionStream(std::unique_ptr<grpc::ClientContext> ctx,
                    std::unique_ptr<CoordinatorClient::SessionStream> stream)
      : ctx_(std::move(ctx)), stream_(std::move(stream)) {}
  bool Write(const tagi::v1::SessionMessage& m) override { return stream_->Write(m); }
  bool Read(tagi::v1::SessionDirective* d) override { return stream_->Read(d); }
  void WritesDone() override { stream_->WritesDone(); }
  void Cancel() override { ctx_->TryCancel(); }
  absl::Status Finish() override { return FromGrpcStatus(stream_->Finish()); }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;  // outlives the stream (declared first)
  std::unique_ptr<CoordinatorClient::SessionStream> stream_;
};

}  // namespace

std::unique_ptr<SessionStream> GrpcSessionStreams::Open() {
  auto ctx = MakeClientContext(absl::InfiniteDuration());  // liveness: the silence timeout
  client_.AddCredentials(ctx.get());
  auto stream = client_.OpenSession(ctx.get());
  return std::make_unique<GrpcSessionStream>(std::move(ctx), std::move(stream));
}

}  // namespace tagi
