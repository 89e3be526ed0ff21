// Stand-in for ATen's CUDA context header (host only).
#pragma once
#include <cuda_runtime.h>
namespace at { namespace cuda { cudaStream_t getCurrentCUDAStream(); } }
