// The NCCL backend's CUDA source that nvcc compiles elsewhere (its 16-bit
// wire kernels), compiled here as C++ against the host emulation.
#include "worker/collective/nccl/wire_kernels.cu"
