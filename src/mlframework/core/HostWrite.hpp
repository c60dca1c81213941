#pragma once
// Private: write passes through each tensor's own host floats (ToFloatVector(), CopyFromFloats()
// or its host bytes), for tensors no fused kernel writes: TensorBackend::Write's default and the
// pairs of a list that span two backends.

#include <span>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/WritePass.hpp>

namespace mlframework::detail {

/// @p options' pass on one pair (in place for WriteOp::Scale: @p src and @p dst are one tensor).
/// The check is of what @p dst holds afterwards (narrowing can overflow where the FP32 product
/// did not); the amax is of the FP32 products.
WritePassResult WritePairThroughFloats(const ITensor& src, ITensor& dst, const WritePassOptions& options);

/// WritePairThroughFloats() on every pair of @p src and @p dst (non-null, the same count), or on
/// every tensor of @p src in place for WriteOp::Scale, folded.
WritePassResult WriteThroughFloats(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                   const WritePassOptions& options);

/// Folds @p part into @p total: the flag raised anywhere, the largest amax.
inline void Fold(WritePassResult& total, const WritePassResult& part) {
  total.FoundNonFinite = total.FoundNonFinite || part.FoundNonFinite;
  total.Amax = part.Amax > total.Amax ? part.Amax : total.Amax;
}

}  // namespace mlframework::detail
