// `tagictl validate JOB.json`: a job file checked here, without a
// coordinator, by the same validation the coordinator runs on submit
// (common/job_spec.h), what its network is and what memory a training step
// takes.
#ifndef TAGI_CTL_VALIDATE_H_
#define TAGI_CTL_VALIDATE_H_

#include <string>

namespace tagi {

struct Validation {
  bool valid = false;
  // For people: a line, and for a valid job a second one with the memory
  // of a training step at its batch on the CPU engine (spec/plan.h).
  std::string text;
  std::string json;  // {"valid": true, "architecture": ..., "parameters": N, "state": M,
                     //  "output": [C, H, W], "memory": {"batch": B, "totalBytes": ...}}
                     // or {"valid": false, "error": "..."}
};

// Reads and validates the job file at `path`. Pure apart from reading it.
Validation ValidateJobFile(const std::string& path);

}  // namespace tagi

#endif  // TAGI_CTL_VALIDATE_H_
