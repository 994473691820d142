// The wire protocol's version, carried by every RPC as gRPC metadata so that
// a worker or client of another version is refused with a message instead
// of misreading messages.
#ifndef TAGI_COMMON_PROTOCOL_H_
#define TAGI_COMMON_PROTOCOL_H_

namespace tagi {

inline constexpr char kProtocolMetadataKey[] = "tagi-protocol";
inline constexpr char kProtocolVersion[] = "1";

// How a failure reason starts when the all-reduced step held NaN or Inf
// (engine.h's CheckReduced): the coordinator fails the job when it comes
// back after a resume.
inline constexpr char kNonFiniteStepReason[] = "non-finite reduced step";
// Likewise when the all-reduced evaluation sums are impossible (trainer.h's
// CheckEvalSums).
inline constexpr char kImpossibleEvalReason[] = "the all-reduced evaluation sums cannot be right";

}  // namespace tagi

#endif  // TAGI_COMMON_PROTOCOL_H_
