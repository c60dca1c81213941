#pragma once
// Private: the CPU kernels of the FP8 block wire (Float8BlockReduce.hpp), the sender's encode
// and the receiver's decode-and-sum, and the reduce-scatter's pipeline of pieces. Exported for
// the tests, which check the codes themselves and force small pieces.

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

/// DecodeSumFloat8Blocks() with each sum multiplied by @p factor (one FP32 multiply, the bits of
/// a separate pass that scales the sums), in the same single pass over @p out.
MLFRAMEWORK_EXPORT void DecodeSumFloat8Blocks(const std::uint8_t* codes, const float* scale_inv, int parts,
                                              std::size_t count, float* out, float factor);

/// A segment: what one rank sends another for @p count values in one message, its block scales
/// (FP32) followed by its codes, padded to whole 4-byte words so that the next segment's scales
/// stay aligned. Its length in words (floats); the scales and codes of the segment of
/// Float8SegmentWords() words at @p segment (4-byte aligned) are the first Float8BlockCount()
/// words and Float8SegmentCodes().
MLFRAMEWORK_EXPORT std::size_t Float8SegmentWords(std::size_t count) noexcept;
MLFRAMEWORK_EXPORT std::uint8_t* Float8SegmentCodes(float* segment, std::size_t count) noexcept;

/// EncodeFloat8Blocks() of @p count values into the segment at @p segment.
MLFRAMEWORK_EXPORT void EncodeFloat8Segment(const float* values, std::size_t count, float* segment);

/// DecodeSumFloat8Blocks() with @p factor of @p parts segments of @p count values each, back to
/// back from @p segments (Float8SegmentWords(count) words apart): the same bits.
MLFRAMEWORK_EXPORT void DecodeSumFloat8Segments(const float* segments, int parts, std::size_t count, float* out,
                                                float factor);

/// Elements per destination in one piece of the pipelined reduce-scatter over @p parts ranks (a
/// whole number of blocks, the codes of all parts about 4 MiB).
MLFRAMEWORK_EXPORT std::size_t Float8WirePiece(std::size_t parts) noexcept;

/// Float8BlockReduceScatter() in pieces of @p piece elements per destination (a multiple of
/// kFloat8WireBlock, so the blocks are the whole chunk's and so are the bits), each encoded into
/// one segment per destination, exchanged with one AllToAll and summed (times @p factor) before
/// the next, through
/// per-thread host scratch that is reused (no allocation once warm). Checked by the caller: FP32
/// input and output of matching sizes, a world of more than one rank; ArgumentError naming
/// `piece` when it is not a positive multiple of kFloat8WireBlock, `factor` when it is not
/// finite. Exported for the tests, which force small pieces.
MLFRAMEWORK_EXPORT void Float8BlockReduceScatterInPieces(IProcessGroup& group, const ITensor& input, ITensor& output,
                                                         std::size_t piece, float factor = 1.0f);

/// Float8BlockAllReduce() in pieces of @p piece elements (a multiple of kFloat8WireBlock), each
/// encoded into one segment, all-gathered and summed before the next; checked by the caller (FP32, more than one
/// rank); ArgumentError naming `piece` as above.
MLFRAMEWORK_EXPORT void Float8BlockAllReduceInPieces(IProcessGroup& group, ITensor& tensor, std::size_t piece);

}  // namespace mlframework::distributed::detail
