#include "common/grpc_util.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/protocol.h"

namespace tagi {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata(kProtocolMetadataKey, kProtocolVersion);
  if (timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  }
  return ctx;
}

absl::Status CheckProtocol(const grpc::ServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find(kProtocolMetadataKey);
  if (it == md.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the client sent no \"", kProtocolMetadataKey,
        "\" metadata; this coordinator speaks tagi protocol ", kProtocolVersion));
  }
  const std::string version(it->second.data(), it->second.size());
  if (version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the client speaks tagi protocol ", version, " but this coordinator speaks ",
        kProtocolVersion, "; upgrade the older side"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // Reconnect quickly after a coordinator restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace tagi
