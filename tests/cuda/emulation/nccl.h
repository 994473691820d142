// NCCL between threads of one process, on the host emulation of the CUDA
// runtime (cuda_runtime.h beside this file): what worker/collective/nccl
// uses, with NCCL's non-blocking semantics. Ranks that pass the same unique
// id form a communicator once all of them have joined (until then
// ncclCommGetAsyncError says ncclInProgress); a collective is queued on the
// caller's stream and completes when every rank's stream has reached it (the
// k-th collective of each rank meet); ncclCommAbort ends the rank's work at
// once and its peers then see ncclRemoteError. Sums of ncclFloat16 and
// ncclBfloat16 add the ranks in order, widening to float and rounding each
// partial sum back to 16 bits (as a ring's hops do). A test double for the
// backend's bootstrap, polling, deadlines and aborts, not NCCL.
#ifndef TAGI_TESTS_CUDA_EMULATION_NCCL_H_
#define TAGI_TESTS_CUDA_EMULATION_NCCL_H_

#include <cstddef>

#include "cuda_runtime.h"

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t { ncclFloat16 = 6, ncclFloat = 7, ncclBfloat16 = 9 };
enum ncclRedOp_t { ncclSum = 0 };

struct ncclUniqueId {
  char internal[128];
};
struct ncclConfig_t {
  int blocking;
};
#define NCCL_CONFIG_INITIALIZER {1}

struct ncclComm;
using ncclComm_t = ncclComm*;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);

#endif  // TAGI_TESTS_CUDA_EMULATION_NCCL_H_
