// The FP8 block wire's collectives: encode on the sender, exchange bytes (all-to-all for the
// reduce-scatter, all-gather for the all-reduce), decode and sum on the receiver. The codes and
// the scales travel as two tensors, FP8 codes and FP32 scales, so every engine moves them with
// the dtypes it knows (an engine that stages through floats keeps FP8 codes exact: the encoder
// never writes a NaN code).
#include <mlframework/distributed/Float8BlockReduce.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/distributed/Float8BlockCodec.hpp"
#include "mlframework/distributed/Float8BlockReduceDevice.hpp"
#include "mlframework/distributed/HostStaging.hpp"

namespace mlframework::distributed {

namespace {

void CheckFloat32(const char* parameter, const ITensor& tensor, const char* call) {
  if (tensor.GetDataType() != DataType::Float32) {
    throw ArgumentError(parameter, std::string(call) + ": the FP8 block wire reduces Float32 tensors, got " +
                                       std::string(ToString(tensor.GetDataType())));
  }
}

// Codes of all ranks for one piece take about this many bytes, so the encoder's output is still
// in cache (L2, else the last level) when the exchange reads it, and the received parts when the
// sum reads them. Smaller pieces mean more exchanges, each a point where every rank waits for
// the slowest: on the 2-core test machine with 2 and 4 ranks, 1 MiB pieces took 1.3-1.8x the
// BF16 reduction's time, 4 MiB 1.0-1.4x (docs/BENCHMARKS.md, "Gradient wires").
constexpr std::size_t kPieceBytes = std::size_t{4} << 20;

// Host memory of the wire, kept per thread and grown to the largest piece asked for: once warm,
// a reduction allocates nothing (every FSDP unit reducing on this thread shares it), and it stays
// about 2 x kPieceBytes however large the tensors are.
struct WireScratch {
  std::vector<std::uint8_t> codes;  // sent, then received
  std::vector<float> scales;        // sent, then received

  // Room for @p parts parts of @p piece elements, sent and received.
  void Reserve(std::size_t parts, std::size_t piece) {
    const std::size_t code_count = 2 * parts * piece;
    const std::size_t scale_count = 2 * parts * detail::Float8BlockCount(piece);
    if (codes.size() < code_count) codes.resize(code_count);
    if (scales.size() < scale_count) scales.resize(scale_count);
  }
};

WireScratch& Scratch() {
  thread_local WireScratch scratch;
  return scratch;
}

// ArgumentError naming `piece` unless it is a positive multiple of kFloat8WireBlock (a piece of
// zero would never end, one across a block would change the blocks and so the bits).
void CheckPiece(std::size_t piece) {
  if (piece == 0 || piece % kFloat8WireBlock != 0) {
    throw ArgumentError("piece", "must be a positive multiple of kFloat8WireBlock (" +
                                     std::to_string(kFloat8WireBlock) + "), got " + std::to_string(piece));
  }
}

// Host memory of @p count elements wrapped as a CPU tensor for the process group (no copy).
template <typename T>
TensorPtr WrapHost(T* data, std::size_t count, DataType dtype) {
  return backends::cpu::Wrap(data, Shape{count}, dtype, nullptr);
}

}  // namespace

double Float8WireBytesPerElement(std::size_t count) noexcept {
  if (count == 0) return 0.0;
  const auto scale_bytes = static_cast<double>(detail::Float8BlockCount(count) * sizeof(float));
  return 1.0 + (scale_bytes / static_cast<double>(count));
}

std::size_t detail::Float8WirePiece(std::size_t parts) noexcept {
  const std::size_t blocks = kPieceBytes / (std::max<std::size_t>(parts, 1) * kFloat8WireBlock);
  return std::max<std::size_t>(blocks, 1) * kFloat8WireBlock;
}

void Float8BlockReduceScatter(IProcessGroup& group, const ITensor& input, ITensor& output) {
  constexpr const char* kCall = "Float8BlockReduceScatter";
  CheckFloat32("input", input, kCall);
  CheckFloat32("output", output, kCall);
  const int world = group.WorldSize();
  detail::CheckScatterSizes(input, output, world);
  if (world == 1) {
    group.ReduceScatter(input, output, ReduceOp::Sum);  // a copy
    return;
  }
  if (detail::Float8WireOnDevice(input, output)) {  // device tensors: kernels and device exchanges, no host staging
    detail::Float8BlockReduceScatterOnDevice(group, input, output,
                                             detail::Float8WireDevicePiece(static_cast<std::size_t>(world)));
    return;
  }
  detail::Float8BlockReduceScatterInPieces(group, input, output,
                                           detail::Float8WirePiece(static_cast<std::size_t>(world)));
}

void detail::Float8BlockReduceScatterInPieces(IProcessGroup& group, const ITensor& input, ITensor& output,
                                              std::size_t piece) {
  const int world = group.WorldSize();
  const auto parts = static_cast<std::size_t>(world);
  const std::size_t count = output.Size();
  CheckPiece(piece);
  piece = std::min(piece, count);
  WireScratch& scratch = Scratch();
  scratch.Reserve(parts, piece);
  const HostRead source(input);
  HostWrite target(output, false);
  const auto* values = static_cast<const float*>(source.Data());
  auto* sums = static_cast<float*>(target.Data());
  // Piece by piece (offsets are whole blocks, so the blocks and their scales are those of the
  // whole chunk): encode this rank's values for every destination, exchange, sum the parts.
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t length = std::min(piece, count - offset);
    const std::size_t blocks = Float8BlockCount(length);
    std::uint8_t* send_codes = scratch.codes.data();
    std::uint8_t* received_codes = send_codes + (parts * length);
    float* send_scales = scratch.scales.data();
    float* received_scales = send_scales + (parts * blocks);
    for (std::size_t p = 0; p < parts; ++p) {
      EncodeFloat8Blocks(values + (p * count) + offset, length, send_codes + (p * length), send_scales + (p * blocks));
    }
    const TensorPtr codes_out = WrapHost(send_codes, parts * length, DataType::Float8E4M3FN);
    const TensorPtr codes_in = WrapHost(received_codes, parts * length, DataType::Float8E4M3FN);
    const TensorPtr scales_out = WrapHost(send_scales, parts * blocks, DataType::Float32);
    const TensorPtr scales_in = WrapHost(received_scales, parts * blocks, DataType::Float32);
    group.AllToAll(*codes_out, *codes_in);
    group.AllToAll(*scales_out, *scales_in);
    DecodeSumFloat8Blocks(received_codes, received_scales, world, length, sums + offset);
  }
  target.Commit();
}

void Float8BlockAllReduce(IProcessGroup& group, ITensor& tensor) {
  CheckFloat32("tensor", tensor, "Float8BlockAllReduce");
  const int world = group.WorldSize();
  if (world == 1) return;
  if (detail::Float8WireOnDevice(tensor, tensor)) {  // device tensors: kernels and device exchanges, no host staging
    detail::Float8BlockAllReduceOnDevice(group, tensor, detail::Float8WireDevicePiece(static_cast<std::size_t>(world)));
    return;
  }
  detail::Float8BlockAllReduceInPieces(group, tensor, detail::Float8WirePiece(static_cast<std::size_t>(world)));
}

void detail::Float8BlockAllReduceInPieces(IProcessGroup& group, ITensor& tensor, std::size_t piece) {
  const int world = group.WorldSize();
  const auto parts = static_cast<std::size_t>(world);
  const std::size_t count = tensor.Size();
  CheckPiece(piece);
  piece = std::min(piece, count);
  WireScratch& scratch = Scratch();
  scratch.Reserve(parts, piece);
  HostWrite target(tensor, true);
  auto* values = static_cast<float*>(target.Data());
  // Piece by piece, as the reduce-scatter: encode this rank's piece, gather every rank's codes
  // and scales, sum them over the piece itself (the encoder has read it already).
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t length = std::min(piece, count - offset);
    const std::size_t blocks = Float8BlockCount(length);
    std::uint8_t* mine_codes = scratch.codes.data();
    std::uint8_t* all_codes = mine_codes + length;
    float* mine_scales = scratch.scales.data();
    float* all_scales = mine_scales + blocks;
    EncodeFloat8Blocks(values + offset, length, mine_codes, mine_scales);
    const TensorPtr codes_out = WrapHost(mine_codes, length, DataType::Float8E4M3FN);
    const TensorPtr codes_in = WrapHost(all_codes, parts * length, DataType::Float8E4M3FN);
    const TensorPtr scales_out = WrapHost(mine_scales, blocks, DataType::Float32);
    const TensorPtr scales_in = WrapHost(all_scales, parts * blocks, DataType::Float32);
    group.AllGather(*codes_out, *codes_in);
    group.AllGather(*scales_out, *scales_in);
    DecodeSumFloat8Blocks(all_codes, all_scales, world, length, values + offset);
  }
  target.Commit();
}

}  // namespace mlframework::distributed
