// The user's side of the Jobs service: typed calls with deadlines and
// absl::Status results. Used by tagictl and the integration tests.
// Thread-safe.
#ifndef TAGI_CTL_JOBS_CLIENT_H_
#define TAGI_CTL_JOBS_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "tagi/v1/jobs.grpc.pb.h"

namespace tagi {

class JobsClient {
 public:
  // `security`: TLS and per-call metadata (the API token), grpc_util.h.
  JobsClient(const std::string& target, absl::Duration rpc_timeout,
             const ClientSecurity& security = {});

  absl::StatusOr<tagi::v1::Job> Submit(const tagi::v1::JobSpec& spec);
  absl::StatusOr<tagi::v1::Job> Get(const std::string& id);
  absl::StatusOr<std::vector<tagi::v1::Job>> List();
  absl::StatusOr<tagi::v1::Job> Cancel(const std::string& id);
  absl::StatusOr<std::vector<tagi::v1::WorkerInfo>> ListWorkers();
  // Streams the job's updates to `on_update` until it ends or `timeout`
  // passes; returns the last state seen.
  absl::StatusOr<tagi::v1::Job> Watch(const std::string& id, absl::Duration timeout,
                                      const std::function<void(const tagi::v1::Job&)>& on_update);
  // The job's log lines after seq `after` (0: from the oldest kept).
  absl::StatusOr<tagi::v1::JobLogs> GetLogs(const std::string& id, uint64_t after,
                                            uint32_t max_lines = 0);
  // The final model file's bytes; `from_snapshot`: the job's newest stored
  // snapshot as a model file instead.
  absl::StatusOr<std::string> DownloadModel(const std::string& id, absl::Duration timeout,
                                            bool from_snapshot = false);

 private:
  const absl::Duration rpc_timeout_;
  std::unique_ptr<tagi::v1::Jobs::Stub> stub_;
};

}  // namespace tagi

#endif  // TAGI_CTL_JOBS_CLIENT_H_
