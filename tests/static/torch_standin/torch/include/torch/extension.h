#pragma once
// Stand-in for <torch/extension.h>, written for Astra's tests: the element types a PyTorch
// extension's device code uses, and nothing else.
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
namespace at {
using c10::BFloat16;
using c10::Float8_e4m3fn;
using c10::Half;
}  // namespace at
