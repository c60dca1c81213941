#pragma once
/// @file Tensor.hpp
/// @brief Tensor factories: the way to make tensors on any device.

#include <span>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// A tensor of @p shape on @p device holding @p values rounded into @p dtype.
/// Throws ArgumentError when `values.size()` differs from the element count of @p shape,
/// BackendError when the device's backend is unavailable.
MLFRAMEWORK_EXPORT TensorPtr FromVector(const std::vector<float>& values, Shape shape,
                                        DataType dtype = DataType::Float32, Device device = Device::CPU());
/// A tensor of zeros.
MLFRAMEWORK_EXPORT TensorPtr Zeros(Shape shape, DataType dtype = DataType::Float32, Device device = Device::CPU());
/// Zero-filled tensors of @p shapes, all of @p dtype on @p device, placed back to back in one
/// allocation (the first on a 64-byte boundary, each next one right after the previous one's
/// last element, no padding): a contiguous gradient buffer in the manner of Megatron-LM's grad
/// buffer and DeepSpeed's contiguous gradients.
///
/// Why: the CPU kernels join tensors that lie exactly back to back into one run of memory, so
/// a fused operation (MultiTensor.hpp) over such a list streams it like one flat tensor, while
/// thousands of small tensors allocated one by one, with other memory between them, run up to
/// about 2x slower (docs/BENCHMARKS.md, layouts "small" and "packed").
/// The tensors are views of one buffer that stays allocated while any of them is alive.
/// Returns an empty list for empty @p shapes. Throws ArgumentError for an invalid @p dtype or
/// when the total element count overflows, BackendError when the device's backend is unavailable.
MLFRAMEWORK_EXPORT std::vector<TensorPtr> ZerosContiguous(const std::vector<Shape>& shapes,
                                                          DataType dtype = DataType::Float32,
                                                          Device device = Device::CPU());
/// Zero-filled tensors of @p dtype with the shapes and devices of @p like, in the same order:
/// one ZerosContiguous() buffer per device. Throws ArgumentNullError naming `like[i]` for a null
/// entry, otherwise as ZerosContiguous().
MLFRAMEWORK_EXPORT std::vector<TensorPtr> ZerosContiguousLike(std::span<const TensorPtr> like, DataType dtype);
/// A scalar (shape `{}`) holding @p value rounded into @p dtype.
MLFRAMEWORK_EXPORT TensorPtr Scalar(float value, DataType dtype = DataType::Float32, Device device = Device::CPU());

}  // namespace mlframework
