// The NCCL emulation of nccl.h: communicators between threads of one
// process, on the emulated streams of emulator.cc.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "worker/collective/wire_precision.h"

namespace {

// The k-th collective of a communicator's ranks.
struct Meeting {
  bool broadcast = false;
  int root = 0;
  size_t count = 0;
  ncclDataType_t type = ncclFloat;
  std::vector<const void*> send;
  std::vector<void*> recv;
  int arrived = 0;
  bool done = false;
};

struct Group {
  int nranks = 0;
  std::vector<bool> joined;
  int joined_count = 0;
  bool aborted = false;  // a rank aborted: the others see ncclRemoteError
  std::map<uint64_t, std::shared_ptr<Meeting>> meetings;
};

std::map<std::string, std::weak_ptr<Group>>& Groups() {
  static auto* groups = new std::map<std::string, std::weak_ptr<Group>>();
  return *groups;
}

std::string Key(const ncclUniqueId& id) { return std::string(id.internal, sizeof(id.internal)); }

size_t ElementBytes(ncclDataType_t type) { return type == ncclFloat ? 4 : 2; }

// 16-bit sums: the ranks in order, each partial sum widened, added in
// float and rounded back to 16 bits.
void Sum16(const Meeting& m, int nranks, std::vector<uint16_t>& out) {
  const tagi::WirePrecision wire =
      m.type == ncclBfloat16 ? tagi::WirePrecision::kBf16 : tagi::WirePrecision::kFp16;
  std::vector<float> acc(m.count, 0.0f);
  for (int r = 0; r < nranks; ++r) {
    tagi::WidenAddFrom16(wire, static_cast<const uint16_t*>(m.send[static_cast<size_t>(r)]), 1.0f,
                         acc.data(), m.count);
    tagi::NarrowTo16(wire, acc.data(), 1.0f, out.data(), m.count);
    tagi::WidenFrom16(wire, out.data(), 1.0f, acc.data(), m.count);
  }
}

// Runs a meeting once every rank has arrived: reads every input first, so
// that in-place buffers work, then writes every output.
void Hold(Meeting& m, int nranks) {
  const size_t bytes = m.count * ElementBytes(m.type);
  std::vector<char> result(bytes, 0);
  if (m.broadcast) {
    std::memcpy(result.data(), m.send[static_cast<size_t>(m.root)], bytes);
  } else if (m.type == ncclFloat) {
    auto* sum = reinterpret_cast<float*>(result.data());
    for (int r = 0; r < nranks; ++r) {
      const auto* in = static_cast<const float*>(m.send[static_cast<size_t>(r)]);
      for (size_t i = 0; i < m.count; ++i) sum[i] += in[i];
    }
  } else {
    std::vector<uint16_t> codes(m.count);
    Sum16(m, nranks, codes);
    std::memcpy(result.data(), codes.data(), bytes);
  }
  for (int r = 0; r < nranks; ++r) {
    std::memcpy(m.recv[static_cast<size_t>(r)], result.data(), bytes);
  }
  m.done = true;
}

}  // namespace

struct ncclComm {
  std::shared_ptr<Group> group;
  int rank = 0;
  uint64_t next = 0;  // sequence number of its next collective
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
};

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> counter{0};
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "tagi-emulated-nccl-%llu",
                static_cast<unsigned long long>(++counter));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  std::lock_guard<std::recursive_mutex> lock(tagi::cuda_emulation::Lock());
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (config == nullptr || config->blocking != 0) return ncclInvalidUsage;  // non-blocking only
  std::shared_ptr<Group> group = Groups()[Key(id)].lock();
  if (group == nullptr) {
    group = std::make_shared<Group>();
    group->nranks = nranks;
    group->joined.assign(static_cast<size_t>(nranks), false);
    Groups()[Key(id)] = group;
  }
  if (group->nranks != nranks) return ncclInvalidArgument;
  if (group->joined[static_cast<size_t>(rank)]) return ncclInvalidUsage;  // duplicate rank
  group->joined[static_cast<size_t>(rank)] = true;
  ++group->joined_count;
  auto* c = new ncclComm();
  c->group = group;
  c->rank = rank;
  *comm = c;
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  std::lock_guard<std::recursive_mutex> lock(tagi::cuda_emulation::Lock());
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->group->aborted) {
    *state = ncclRemoteError;
  } else if (comm->group->joined_count < comm->group->nranks) {
    *state = ncclInProgress;
  } else {
    *state = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm == nullptr ? ncclInvalidArgument : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::lock_guard<std::recursive_mutex> lock(tagi::cuda_emulation::Lock());
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::lock_guard<std::recursive_mutex> lock(tagi::cuda_emulation::Lock());
  if (comm == nullptr) return ncclSuccess;
  comm->aborted->store(true);
  comm->group->aborted = true;
  delete comm;
  return ncclSuccess;
}

namespace {

ncclResult_t Collective(bool broadcast, int root, const void* send, void* recv, size_t count,
                        ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(tagi::cuda_emulation::Lock());
  if (comm == nullptr || (type != ncclFloat && type != ncclFloat16 && type != ncclBfloat16)) {
    return ncclInvalidArgument;
  }
  if (comm->group->joined_count < comm->group->nranks) return ncclInvalidUsage;  // not formed
  if (!tagi::cuda_emulation::InDeviceMemory(send, count * ElementBytes(type)) ||
      !tagi::cuda_emulation::InDeviceMemory(recv, count * ElementBytes(type))) {
    std::fprintf(stderr, "nccl emulation: a buffer is not in device memory\n");
    return ncclInvalidArgument;
  }
  std::shared_ptr<Group> group = comm->group;
  std::shared_ptr<Meeting>& slot = group->meetings[comm->next++];
  if (slot == nullptr) {
    slot = std::make_shared<Meeting>();
    slot->broadcast = broadcast;
    slot->root = root;
    slot->count = count;
    slot->type = type;
    slot->send.assign(static_cast<size_t>(group->nranks), nullptr);
    slot->recv.assign(static_cast<size_t>(group->nranks), nullptr);
  } else if (slot->broadcast != broadcast || slot->root != root || slot->count != count ||
             slot->type != type) {
    return ncclInvalidUsage;  // the ranks called different collectives
  }
  std::shared_ptr<Meeting> meeting = slot;
  const int rank = comm->rank;
  std::shared_ptr<std::atomic<bool>> aborted = comm->aborted;
  bool arrived = false;
  const void* in = send;
  void* out = recv;
  const cudaError_t err = tagi::cuda_emulation::EnqueueBlocking(
      stream, [group, meeting, rank, aborted, arrived, in, out]() mutable {
        if (aborted->load() || group->aborted) return true;  // the work is dropped
        if (!arrived) {
          meeting->send[static_cast<size_t>(rank)] = in;
          meeting->recv[static_cast<size_t>(rank)] = out;
          ++meeting->arrived;
          arrived = true;
        }
        if (!meeting->done && meeting->arrived == group->nranks) Hold(*meeting, group->nranks);
        return meeting->done;
      });
  return err == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

}  // namespace

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return Collective(false, 0, send, recv, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || root < 0 || root >= comm->group->nranks) return ncclInvalidArgument;
  return Collective(true, root, send, recv, count, type, comm, stream);
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result";
}

const char* ncclGetLastError(ncclComm_t /*comm*/) { return ""; }
