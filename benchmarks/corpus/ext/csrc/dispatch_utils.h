// Dispatch helpers of this extension: run a lambda once for the tensor's element type, with
// `scalar_t` naming it (the shape PyTorch's AT_DISPATCH macros have).
#pragma once
#include <torch/all.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define EXT_DISPATCH_CASE(ENUM, TYPE, ...) \
  case ENUM: {                             \
    using scalar_t = TYPE;                 \
    __VA_ARGS__();                         \
    break;                                 \
  }

#define EXT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...)                          \
  switch (TYPE) {                                                             \
    EXT_DISPATCH_CASE(c10::ScalarType::Float, float, __VA_ARGS__)             \
    EXT_DISPATCH_CASE(c10::ScalarType::Half, __half, __VA_ARGS__)             \
    EXT_DISPATCH_CASE(c10::ScalarType::BFloat16, __nv_bfloat16, __VA_ARGS__)  \
    default: break;                                                           \
  }

#define EXT_LDG(arg) __ldg(arg)
