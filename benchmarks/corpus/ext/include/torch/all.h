// Stand-in for PyTorch's <torch/all.h> in this corpus: just enough host-side declarations for the
// extension files to read like real ones. Astra never compiles it into a kernel's unit (host
// code); the compile database points here so that the include resolves as it would in a build.
#pragma once
#include <cstdint>
#include <vector>

namespace c10 {
struct Half { unsigned short bits; };
struct BFloat16 { unsigned short bits; };
enum class ScalarType { Float, Half, BFloat16 };
}  // namespace c10

namespace at {
using c10::ScalarType;
class Tensor {
 public:
  int64_t size(int64_t dim) const;
  int64_t numel() const;
  int64_t stride(int64_t dim) const;
  ScalarType scalar_type() const;
  template <class T> T* data_ptr() const;
};
}  // namespace at

namespace torch {
using at::Tensor;
}
