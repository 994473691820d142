// The worker session's stream to the coordinator, as the Session sees it:
// the gRPC one in production (GrpcSessionStreams, over the worker's
// CoordinatorClient), an in-process fake in tests (tests/worker/).
#ifndef TAGI_WORKER_SESSION_STREAM_H_
#define TAGI_WORKER_SESSION_STREAM_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "tagi/v1/cluster.pb.h"
#include "worker/coordinator_client.h"

namespace tagi {

// One open stream. Write and Read may run on two threads at once (one
// writer, one reader); the rest on the writer's.
class SessionStream {
 public:
  virtual ~SessionStream() = default;
  // False once the stream is broken.
  virtual bool Write(const tagi::v1::SessionMessage& m) = 0;
  // Blocks for the next directive; false once the stream ended (closed by
  // the coordinator, broken, or Cancel).
  virtual bool Read(tagi::v1::SessionDirective* d) = 0;
  // No more messages: the coordinator sees the worker leave.
  virtual void WritesDone() = 0;
  // Ends the stream at once (a Read in progress returns false).
  virtual void Cancel() = 0;
  // How it ended; after Read returned false.
  virtual absl::Status Finish() = 0;
};

// Opens streams to the coordinator.
class SessionStreams {
 public:
  virtual ~SessionStreams() = default;
  virtual std::unique_ptr<SessionStream> Open() = 0;
  virtual std::string target() const = 0;  // for the log
};

// The coordinator's Cluster.Session over gRPC, with the client's
// credentials; no deadline (the stream lives as long as the worker; the
// session's silence timeout is its liveness check). `client` outlives it.
class GrpcSessionStreams final : public SessionStreams {
 public:
  explicit GrpcSessionStreams(CoordinatorClient& client) : client_(client) {}
  std::unique_ptr<SessionStream> Open() override;
  std::string target() const override { return client_.target(); }

 private:
  CoordinatorClient& client_;
};

}  // namespace tagi

#endif  // TAGI_WORKER_SESSION_STREAM_H_
