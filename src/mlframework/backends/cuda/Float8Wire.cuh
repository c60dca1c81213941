#pragma once
// Private: the FP8 block gradient wire's kernels (distributed/Float8BlockReduce.hpp), with the
// CPU codec's bits (core/Float8BlockMath.hpp). Raw device pointers; CudaFloat8Wire.cpp queues
// them through the driver with their operands.

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace mlframework::backends::cuda {

/// Encodes @p runs runs of @p length floats, run r from `values + r * stride`, into blocks of
/// Float8BlockRuns::kBlockValues: codes at `codes + r * length`, inverse scales at `scale_inv + r * blocks`
/// (`blocks` covering @p length). Nothing is queued for an empty run.
void LaunchFloat8WireEncode(const float* values, std::size_t runs, std::size_t length, std::size_t stride,
                            std::uint8_t* codes, float* scale_inv, cudaStream_t stream);

/// `out[i] = sum over p < parts of code_p[i] * scale_inv_p[i / Float8BlockRuns::kBlockValues]` for i below
/// @p length, in FP32 in rank order; part p's codes at `codes + p * length`, its scales at
/// `scale_inv + p * blocks`.
void LaunchFloat8WireDecodeSum(const std::uint8_t* codes, const float* scale_inv, std::size_t parts, std::size_t length,
                               float* out, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
