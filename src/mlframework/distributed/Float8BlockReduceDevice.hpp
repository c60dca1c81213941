#pragma once
// Private: the FP8 block wire's reductions on tensors the host cannot address (CUDA tensors):
// encode into device scratch, exchange the device codes and scales with the group, decode and
// sum on the device, all through the tensors' backend (TensorBackend::EncodeFloat8Blocks and
// DecodeSumFloat8Blocks), with no host round trip. Float8BlockReduce.cpp's public functions
// check their arguments and then dispatch here. Exported for the tests, which force small pieces.

#include <cstddef>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::detail {

/// True when @p a and @p b both live on one device of one backend that the host cannot address
/// (no ITensor::HostBytes(), a backend to run the wire's kernels): the wire then runs there.
MLFRAMEWORK_EXPORT bool Float8WireOnDevice(const ITensor& a, const ITensor& b) noexcept;

/// Elements per destination in one device piece over @p parts ranks: a whole number of blocks,
/// the codes of all parts about 64 MiB (every exchange moves megabytes per peer, and the scratch
/// stays bounded however large the unit is).
MLFRAMEWORK_EXPORT std::size_t Float8WireDevicePiece(std::size_t parts) noexcept;

/// Float8BlockReduceScatter() on the device, in pieces of @p piece elements per destination (a
/// positive multiple of kFloat8WireBlock, else ArgumentError naming `piece`): per piece, one
/// encode of every destination's run, two IProcessGroup::AllToAll calls (codes, scales) and one
/// decoding sum into @p output. Checked by the caller: FP32 input and output of matching sizes
/// on one device (Float8WireOnDevice()), a world of more than one rank.
MLFRAMEWORK_EXPORT void Float8BlockReduceScatterOnDevice(IProcessGroup& group, const ITensor& input, ITensor& output,
                                                         std::size_t piece);

/// Float8BlockAllReduce() on the device, in pieces of @p piece elements (as above): per piece,
/// one encode, two IProcessGroup::AllGather calls and one decoding sum over the piece itself.
MLFRAMEWORK_EXPORT void Float8BlockAllReduceOnDevice(IProcessGroup& group, ITensor& tensor, std::size_t piece);

}  // namespace mlframework::distributed::detail
