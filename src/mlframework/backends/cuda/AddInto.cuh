#pragma once
// Private: accumulate one list into another (dst += alpha * src; FSDP's gradient accumulation).

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// `dst = round_to_dst(widen(dst) + round_fp32(alpha * widen(src)))` for every pair of @p launch
/// (slot 0 the source, slot 1 the destination); no check, no flag.
void LaunchAddInto(const Launch& launch, float alpha, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
