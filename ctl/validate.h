// `tagictl validate JOB.json`: a job file checked here, without a
// coordinator, by the same validation the coordinator runs on submit
// (common/job_spec.h), and what its network is.
#ifndef TAGI_CTL_VALIDATE_H_
#define TAGI_CTL_VALIDATE_H_

#include <string>

namespace tagi {

struct Validation {
  bool valid = false;
  std::string text;  // for people: one line, ending in a newline
  std::string json;  // {"valid": true, "architecture": ..., "parameters": N, "state": M,
                     //  "output": [C, H, W]} or {"valid": false, "error": "..."}
};

// Reads and validates the job file at `path`. Pure apart from reading it.
Validation ValidateJobFile(const std::string& path);

}  // namespace tagi

#endif  // TAGI_CTL_VALIDATE_H_
