#include "common/grpc_util.h"

#include <grpcpp/support/client_interceptor.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
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

absl::Status CheckProtocol(const grpc::ServerContextBase& context) {
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

namespace {

// Adds one metadata pair to every call's initial metadata. Call credentials
// would do this too, but gRPC sends those over TLS only; a join token must
// also work on loopback plaintext.
class MetadataInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetadataInterceptor(const std::string& key, const std::string& value)
      : key_(key), value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({key_, value_});
    }
    methods->Proceed();
  }

 private:
  const std::string& key_;
  const std::string& value_;
};

class MetadataInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  MetadataInterceptorFactory(std::string key, std::string value)
      : key_(std::move(key)), value_(std::move(value)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new MetadataInterceptor(key_, value_);  // gRPC owns it
  }

 private:
  const std::string key_;
  const std::string value_;
};

absl::Status ReadPem(const std::string& path, const std::string& flag, std::string& out) {
  if (path.empty()) return absl::OkStatus();
  auto pem = ReadPemFile(path, flag);
  if (!pem.ok()) return pem.status();
  out = *std::move(pem);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag) {
  auto pem = ReadFile(path, size_t{1} << 20);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(),
                        absl::StrCat(flag, " ", path, ": ", pem.status().message()));
  }
  if (pem->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM file (no -----BEGIN line)"));
  }
  return pem;
}

absl::Status LoadClientTls(const std::string& ca_file, const std::string& cert_file,
                           const std::string& key_file, ClientSecurity& security) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together (mutual TLS)");
  }
  if (!cert_file.empty() && ca_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert/--tls-key need --tls-ca (TLS is off without it)");
  }
  if (auto st = ReadPem(ca_file, "--tls-ca", security.tls_ca_pem); !st.ok()) return st;
  if (auto st = ReadPem(cert_file, "--tls-cert", security.tls_cert_pem); !st.ok()) return st;
  return ReadPem(key_file, "--tls-key", security.tls_key_pem);
}

std::string ExplainCallFailure(const absl::Status& status, bool tls) {
  std::string msg(status.message());
  if (status.code() == absl::StatusCode::kUnavailable) {
    absl::StrAppend(&msg, tls ? " (TLS is on: does the coordinator serve TLS with a certificate "
                                "signed by the --tls-ca given, for this host name?)"
                              : " (if the coordinator serves TLS, pass --tls-ca)");
  } else if (status.code() == absl::StatusCode::kUnauthenticated) {
    absl::StrAppend(&msg, " (check the token file)");
  }
  return msg;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ClientSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // Reconnect quickly after a coordinator restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (security.tls_ca_pem.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.tls_ca_pem;
    ssl.pem_private_key = security.tls_key_pem;
    ssl.pem_cert_chain = security.tls_cert_pem;
    creds = grpc::SslCredentials(ssl);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (!security.metadata_key.empty()) {
    factories.push_back(std::make_unique<MetadataInterceptorFactory>(security.metadata_key,
                                                                     security.metadata_value));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, args,
                                                                 std::move(factories));
}

}  // namespace tagi
