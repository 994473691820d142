// The context of one Cluster call made by a test that speaks the worker
// protocol itself (an attacker, a replayed credential): the protocol
// metadata, a 10 s deadline and, when `id` is not empty, the worker
// credentials.
#ifndef TAGI_TESTS_TESTING_WORKER_CALL_H_
#define TAGI_TESTS_TESTING_WORKER_CALL_H_

#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/protocol.h"
#include "common/worker_credentials.h"

namespace tagi::testing {

inline std::unique_ptr<grpc::ClientContext> WorkerCallContext(const std::string& id = "",
                                                              const std::string& secret = "") {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata(kProtocolMetadataKey, kProtocolVersion);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!id.empty()) {
    ctx->AddMetadata(kWorkerIdMetadataKey, id);
    ctx->AddMetadata(kWorkerSecretMetadataKey, secret);
  }
  return ctx;
}

}  // namespace tagi::testing

#endif  // TAGI_TESTS_TESTING_WORKER_CALL_H_
