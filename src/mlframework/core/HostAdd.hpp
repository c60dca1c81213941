#pragma once
// Private: `dst = round(dst + round_fp32(alpha * src))` through host floats, for one pair of any
// tensors: the add of TensorBackend::Write's default and of the mixed-backend pairs of AddInto().

#include <cstddef>
#include <vector>

#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

inline void HostAddInto(const ITensor& src, ITensor& dst, float alpha) {
  const std::vector<float> add = src.ToFloatVector();
  std::vector<float> sum = dst.ToFloatVector();
  for (std::size_t j = 0; j < sum.size(); ++j) {
    const float product = alpha * add[j];
    sum[j] = sum[j] + product;
  }
  dst.CopyFromFloats(sum);
}

}  // namespace mlframework::detail
