#include <cmath>
#include <string>
#include <vector>

#include <mlframework/c/multi_tensor.h>
#include <mlframework/core/MultiTensor.hpp>

#include "Call.hpp"
#include "Tensors.hpp"

extern "C" {

mlfw_status mlfw_unscale_and_check(const DLTensor* const* tensors, size_t count, float factor, void* stream,
                                   int* found_inf, float* amax) {
  return Call([&] {
    int& found = Deref(found_inf, "found_inf");
    const auto list = BorrowList(tensors, count, "tensors");
    const StreamScope scope(stream, DeviceOf(list));
    if (amax == nullptr) {
      found = mlframework::UnscaleAndCheck(list, factor) ? 1 : 0;
      return;
    }
    const mlframework::NonFiniteAndAmax result = mlframework::UnscaleCheckAndAmax(list, factor);
    found = result.FoundNonFinite ? 1 : 0;
    *amax = result.Amax;
  });
}

mlfw_status mlfw_has_non_finite(const DLTensor* const* tensors, size_t count, void* stream, int* found) {
  return Call([&] {
    int& result = Deref(found, "found");
    const auto list = BorrowList(tensors, count, "tensors");
    const StreamScope scope(stream, DeviceOf(list));
    result = mlframework::HasNonFinite(list) ? 1 : 0;
  });
}

mlfw_status mlfw_sum_of_squares(const DLTensor* const* tensors, size_t count, float factor, void* stream, double* sum) {
  return Call([&] {
    double& result = Deref(sum, "sum");
    const auto list = BorrowList(tensors, count, "tensors");
    const StreamScope scope(stream, DeviceOf(list));
    result = mlframework::SumOfSquares(list, factor);
  });
}

mlfw_status mlfw_scale_in_place(const DLTensor* const* tensors, size_t count, float factor, void* stream) {
  return Call([&] {
    const auto list = BorrowList(tensors, count, "tensors");
    const StreamScope scope(stream, DeviceOf(list));
    mlframework::ScaleInPlace(list, factor);
  });
}

mlfw_status mlfw_clip_grad_norm(const DLTensor* const* tensors, size_t count, double max_norm, void* stream,
                                double* total_norm) {
  return Call([&] {
    double& norm = Deref(total_norm, "total_norm");
    if (!(std::isfinite(max_norm) && max_norm > 0.0)) {
      throw mlframework::ArgumentError("max_norm", "must be finite and > 0, got " + std::to_string(max_norm));
    }
    const auto list = BorrowList(tensors, count, "tensors");
    const StreamScope scope(stream, DeviceOf(list));
    const double measured = std::sqrt(mlframework::SumOfSquares(list));
    // torch.nn.utils.clip_grad_norm_'s coefficient
    constexpr double kEpsilon = 1e-6;
    if (std::isfinite(measured) && measured > max_norm) {
      mlframework::ScaleInPlace(list, static_cast<float>(max_norm / (measured + kEpsilon)));
    }
    norm = measured;
  });
}

mlfw_status mlfw_cast_into(const DLTensor* const* src, const DLTensor* const* dst, size_t count, float factor,
                           void* stream, int* found_inf) {
  return Call([&] {
    const auto sources = BorrowList(src, count, "src");
    const auto targets = BorrowList(dst, count, "dst");
    const StreamScope scope(stream, DeviceOf(sources));
    if (found_inf == nullptr) {
      mlframework::CopyInto(sources, targets, factor);
    } else {
      *found_inf = mlframework::CastInto(sources, targets, factor) ? 1 : 0;
    }
  });
}

}  // extern "C"
