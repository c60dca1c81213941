#pragma once
/// @file Float8BlockReduce.hpp
/// @brief Gradient reductions that send FP8 (E4M3FN) codes with one FP32 scale per block of
/// kFloat8WireBlock values and sum the parts in FP32 at the receiver (FSDP's
/// GradientWire::Float8Blocks).
///
/// The sender splits its FP32 values into blocks of kFloat8WireBlock (the last one of each
/// destination's chunk may be short), scales each block by a power of two `2^k` chosen so that
/// its largest magnitude `amax` lands in (224, 448], and rounds the scaled values to E4M3FN
/// (nearest even). The receiver widens every rank's part exactly (`code * 2^-k`), adds the parts
/// in FP32 in rank order 0, 1, ..., so every rank and every engine computes the same bits, and
/// writes the FP32 sums: no 8-bit or 16-bit rounding of any sum.
///
/// Error bound, per element `i` of the result, with `x_p` rank p's value and `a_p` the amax of
/// its block: `|result - sum_p x_p| <= sum_p max(|x_p| * 2^-4, a_p * 2^-17) + fp32`. The first
/// term is E4M3's half unit in the last place of a normal value (3 mantissa bits), the second its
/// half subnormal step, 2^-10 in scaled units, one scaled unit being `2^-k < a_p / 224`; `fp32` is
/// the error of the FP32 additions, at most `(P - 1) * 2^-24 * sum_p |x_p|` over P ranks (the
/// FP32 reduce-scatter has an error of the same kind). Blocks whose amax is below 2^-117 (the
/// scale is capped at 2^126) add at most 2^-136 absolute.
///
/// Exactness where it matters: a block holding an infinity or a NaN is sent with a NaN scale, so
/// every element of that block arrives as NaN and the receiver's overflow check sees it; a
/// non-finite gradient is never turned into a finite one.
///
/// Wire bytes per element: `1 + 4 / kFloat8WireBlock` (1.016 for 256), against 2 for BF16 and
/// 4 for FP32.

#include <cstddef>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// Values per FP32 scale on the FP8 gradient wire. 256 costs 1/64 of a byte per element in
/// scales (0.508x of BF16's bytes) and keeps an outlier's effect on its neighbours' precision
/// to 256 values; 1024 would save 0.01 bytes per element for four times that reach.
inline constexpr std::size_t kFloat8WireBlock = Float8BlockRuns::kBlockValues;

/// Bytes one element costs on the FP8 gradient wire for a part of @p count elements (codes plus
/// the part's share of block scales).
MLFRAMEWORK_EXPORT double Float8WireBytesPerElement(std::size_t count) noexcept;

/// Reduce-scatter (sum) of FP32 @p input over @p group through the FP8 block wire: chunk `p` of
/// every rank's @p input is encoded by its sender, exchanged with IProcessGroup::AllToAll, and
/// rank `p` sums the decoded parts in rank order into @p output (FP32,
/// `input.Size() == output.Size() * WorldSize()`), each sum multiplied by @p factor (one FP32
/// multiply in the same pass: the bits of summing and then scaling the output; FSDP passes
/// 1 / WorldSize() to average). With one rank nothing travels and @p output is
/// `input * factor`. Collective over @p group; ArgumentError naming `input` or `output` for a
/// dtype that is not Float32 or a size mismatch, `factor` when it is not finite, before any
/// communication.
MLFRAMEWORK_EXPORT void Float8BlockReduceScatter(IProcessGroup& group, const ITensor& input, ITensor& output,
                                                 float factor = 1.0f);

/// All-reduce (sum) of FP32 @p tensor over @p group through the FP8 block wire: every rank
/// encodes its whole tensor once, the codes and scales are all-gathered, and every rank sums all
/// parts in rank order (so every rank holds the same bits). With one rank @p tensor is kept.
/// ArgumentError naming `tensor` for a dtype that is not Float32.
MLFRAMEWORK_EXPORT void Float8BlockAllReduce(IProcessGroup& group, ITensor& tensor);

}  // namespace mlframework::distributed
