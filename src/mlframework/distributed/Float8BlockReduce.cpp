// The FP8 block wire's collectives: encode on the sender, exchange bytes (all-to-all for the
// reduce-scatter, all-gather for the all-reduce), decode and sum on the receiver. A rank's scales
// and codes for one destination travel together as one segment (Float8BlockCodec.hpp), so each
// piece is one collective, a point where every rank waits for the slowest, rather than two.
#include <mlframework/distributed/Float8BlockReduce.hpp>

#include <algorithm>
#include <cmath>
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
// about 2 x kPieceBytes however large the tensors are. Words (floats), so that every segment's
// scales are aligned.
struct WireScratch {
  std::vector<float> words;  // the segments sent, then those received

  // Room for @p parts segments of @p piece elements, sent and received.
  float* Reserve(std::size_t parts, std::size_t piece) {
    const std::size_t size = 2 * parts * detail::Float8SegmentWords(piece);
    if (words.size() < size) words.resize(size);
    return words.data();
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

// ArgumentError naming `factor` unless it is finite (an infinite or NaN factor would turn every
// sum, zeros included, into Inf or NaN: the overflow check would see a gradient that was fine).
void CheckFactor(float factor) {
  if (!std::isfinite(factor)) {
    throw ArgumentError("factor", "must be finite, got " + std::to_string(factor));
  }
}

// @p words words of segments wrapped as a CPU tensor of their bytes for the process group (no
// copy): FP8 moves as bytes in every engine, and a float round trip keeps every byte (E4M3FN
// widens exactly and has one NaN per sign).
TensorPtr WrapSegments(float* words, std::size_t count) {
  return backends::cpu::Wrap(words, Shape{count * sizeof(float)}, DataType::Float8E4M3FN, nullptr);
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

void Float8BlockReduceScatter(IProcessGroup& group, const ITensor& input, ITensor& output, float factor) {
  constexpr const char* kCall = "Float8BlockReduceScatter";
  CheckFloat32("input", input, kCall);
  CheckFloat32("output", output, kCall);
  CheckFactor(factor);
  const int world = group.WorldSize();
  detail::CheckScatterSizes(input, output, world);
  if (world == 1) {
    group.ReduceScatter(input, output, ReduceOp::Sum);  // a copy
    if (factor != 1.0f) {
      detail::HostWrite target(output, true);
      auto* values = static_cast<float*>(target.Data());
      for (std::size_t i = 0; i < output.Size(); ++i) values[i] *= factor;
      target.Commit();
    }
    return;
  }
  if (detail::Float8WireOnDevice(input, output)) {  // device tensors: kernels and device exchanges, no host staging
    detail::Float8BlockReduceScatterOnDevice(group, input, output,
                                             detail::Float8WireDevicePiece(static_cast<std::size_t>(world)));
    // The sums times the factor, one FP32 multiply each after the whole sum: the host
    // decoding pass's bits, in a second pass over the shard on the device.
    if (factor != 1.0f) output.MultiplyInPlace(factor);
    return;
  }
  detail::Float8BlockReduceScatterInPieces(group, input, output,
                                           detail::Float8WirePiece(static_cast<std::size_t>(world)), factor);
}

void detail::Float8BlockReduceScatterInPieces(IProcessGroup& group, const ITensor& input, ITensor& output,
                                              std::size_t piece, float factor) {
  const int world = group.WorldSize();
  const auto parts = static_cast<std::size_t>(world);
  const std::size_t count = output.Size();
  CheckPiece(piece);
  CheckFactor(factor);
  piece = std::min(piece, count);
  float* const scratch = Scratch().Reserve(parts, piece);
  const HostRead source(input);
  HostWrite target(output, false);
  const auto* values = static_cast<const float*>(source.Data());
  auto* sums = static_cast<float*>(target.Data());
  // Piece by piece (offsets are whole blocks, so the blocks and their scales are those of the
  // whole chunk): encode this rank's values into one segment per destination, exchange the
  // segments in one all-to-all, sum the parts.
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t length = std::min(piece, count - offset);
    const std::size_t words = Float8SegmentWords(length);
    float* sent = scratch;
    float* received = scratch + (parts * words);
    for (std::size_t p = 0; p < parts; ++p) {
      EncodeFloat8Segment(values + (p * count) + offset, length, sent + (p * words));
    }
    group.AllToAll(*WrapSegments(sent, parts * words), *WrapSegments(received, parts * words));
    DecodeSumFloat8Segments(received, world, length, sums + offset, factor);
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
  float* const scratch = Scratch().Reserve(parts, piece);
  HostWrite target(tensor, true);
  auto* values = static_cast<float*>(target.Data());
  // Piece by piece, as the reduce-scatter: encode this rank's piece into a segment, gather every
  // rank's segment, sum them over the piece itself (the encoder has read it already).
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t length = std::min(piece, count - offset);
    const std::size_t words = Float8SegmentWords(length);
    float* mine = scratch;
    float* all = scratch + words;
    EncodeFloat8Segment(values + offset, length, mine);
    group.AllGather(*WrapSegments(mine, words), *WrapSegments(all, parts * words));
    DecodeSumFloat8Segments(all, world, length, values + offset, 1.0f);
  }
  target.Commit();
}

}  // namespace mlframework::distributed
