#pragma once
// Private: the CPU kernels of the FP8 block wire (Float8BlockReduce.hpp): the sender's encode
// and the receiver's decode-and-sum. Exported for the tests, which check the codes themselves.

#include <cstddef>
#include <cstdint>

#include <mlframework/export.hpp>

namespace mlframework::distributed::detail {

/// Blocks of kFloat8WireBlock that cover @p count values (the last one may be short).
MLFRAMEWORK_EXPORT std::size_t Float8BlockCount(std::size_t count) noexcept;

/// Encodes @p count values: `codes[i]` the E4M3FN bits of `values[i] * 2^k` of its block, and
/// `scale_inv[b] = 2^-k` of block b (NaN, with zero codes, for a block holding Inf or NaN).
MLFRAMEWORK_EXPORT void EncodeFloat8Blocks(const float* values, std::size_t count, std::uint8_t* codes,
                                           float* scale_inv);

/// `out[i] = sum over p = 0, 1, ..., parts - 1 of decode(part p)[i]`, in FP32 in that order;
/// part p's codes start at `codes + p * count` and its scales at
/// `scale_inv + p * Float8BlockCount(count)`.
MLFRAMEWORK_EXPORT void DecodeSumFloat8Blocks(const std::uint8_t* codes, const float* scale_inv, int parts,
                                              std::size_t count, float* out);

}  // namespace mlframework::distributed::detail
