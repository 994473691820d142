// The CUDA sources of the engine that nvcc compiles elsewhere, compiled
// here as C++ against the host emulation (cuda_runtime.h): the kernels run
// on the host, each launch thread by thread.
#include "worker/engine/cuda/device.cu"
#include "worker/engine/cuda/image_kernels.cu"
#include "worker/engine/cuda/kernels.cu"
