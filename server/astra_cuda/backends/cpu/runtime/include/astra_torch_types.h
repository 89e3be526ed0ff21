// The CPU build of a PyTorch extension, before the shim (forced in with -include): the parts of
// torch its device code names — c10's macros and element types (at::Half, c10::BFloat16, the
// Float8 types, c10::complex), at::acc_type and at::opmath_type — read as a host compiler reads
// them, as torch's own CPU kernels use them (exact IEEE conversions, the same values as the GPU's).
// The rest of torch (tensors, streams, pybind11) is host code the kernel does not run: the unit's
// torch #includes stay nvcc's (ASTRA_HOST_HEADERS) and lead to astra_torch_device.h here.
#pragma once
#if __has_include(<c10/macros/Macros.h>)
#include <c10/macros/Macros.h>
#endif
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#if __has_include(<c10/util/Float8_e4m3fn.h>)
#include <c10/util/Float8_e4m3fn.h>
#endif
#if __has_include(<c10/util/Float8_e5m2.h>)
#include <c10/util/Float8_e5m2.h>
#endif
#if __has_include(<c10/util/Float8_e4m3fnuz.h>)
#include <c10/util/Float8_e4m3fnuz.h>
#endif
#if __has_include(<c10/util/Float8_e5m2fnuz.h>)
#include <c10/util/Float8_e5m2fnuz.h>
#endif
#if __has_include(<c10/util/complex.h>)
#include <c10/util/complex.h>
#endif
#if __has_include(<ATen/AccumulateType.h>)
#include <ATen/AccumulateType.h>
#endif
#if __has_include(<ATen/OpMathType.h>)
#include <ATen/OpMathType.h>
#endif
namespace at {   // as <ATen/ATen.h> names them (its namespace is the kernel's view of torch)
using c10::BFloat16;
using c10::Half;
}  // namespace at
