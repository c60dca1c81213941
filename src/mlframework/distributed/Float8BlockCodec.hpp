#pragma once
// Private: the CPU kernels of the FP8 block wire (Float8BlockReduce.hpp), the sender's encode
// and the receiver's decode-and-sum, and its reduce-scatter over buffers the caller keeps.
// Exported for the tests, which check the codes themselves, and for FSDP.

#include <cstddef>
#include <cstdint>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
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

/// The wire's buffers for a reduce-scatter of chunks of `count` elements over P ranks: codes
/// (Float8E4M3FN, `P * count` elements) and scales (Float32, `P * Float8BlockCount(count)`),
/// sent and received; contents unspecified on entry. FSDP passes buffers of its pool, so a step
/// reuses them instead of faulting fresh pages in.
struct Float8WireTensors {
  ITensor& send_codes;
  ITensor& send_scales;
  ITensor& received_codes;
  ITensor& received_scales;
};

/// Float8BlockReduceScatter() through @p wire (checked by the caller: FP32 input and output of
/// matching sizes, a world of more than one rank).
MLFRAMEWORK_EXPORT void Float8BlockReduceScatterThrough(IProcessGroup& group, const ITensor& input, ITensor& output,
                                                        const Float8WireTensors& wire);

}  // namespace mlframework::distributed::detail
