// The FP8 block wire on device tensors (Float8BlockReduceDevice.hpp). NCCL cannot sum scaled
// FP8, so the parts travel as bytes (all-to-all for the reduce-scatter, all-gather for the
// all-reduce) and the receiver sums them in a kernel, in rank order, with the CPU codec's bits.
//
// Scratch: allocated per call through the tensors' backend, on their device, and sized to one
// piece. The CUDA backend takes it from its stream-ordered pool, which keeps the memory once
// warm (no cudaMalloc, no synchronisation per step), and frees it ordered after the exchange
// that reads it. Scratch kept across calls would outlive the device context (and, in the tests,
// the driver) that made it; pieces keep it to about twice the piece's codes however large the
// unit is.
#include "mlframework/distributed/Float8BlockReduceDevice.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>

#include "mlframework/distributed/Float8BlockCodec.hpp"

namespace mlframework::distributed::detail {

namespace {

// Codes of all ranks for one piece: every peer's message is megabytes (NCCL's bandwidth regime)
// at any world size a node has.
constexpr std::size_t kDevicePieceBytes = std::size_t{64} << 20;

void CheckDevicePiece(std::size_t piece) {
  if (piece == 0 || piece % kFloat8WireBlock != 0) {
    throw ArgumentError("piece", "must be a positive multiple of kFloat8WireBlock (" +
                                     std::to_string(kFloat8WireBlock) + "), got " + std::to_string(piece));
  }
}

// One buffer of the exchange: a device tensor of the largest piece's size, and a view of its
// first elements for the last, shorter piece.
class DeviceScratch {
 public:
  DeviceScratch(const TensorBackend& backend, Device device, std::size_t count, DataType dtype)
      : backend_(backend), tensor_(backend.Allocate(Shape{count}, dtype, device)) {}

  ITensor& Whole() { return *tensor_; }
  // The first @p count elements (the whole tensor when they are all of it).
  ITensor& First(std::size_t count) {
    if (count == tensor_->Size()) return *tensor_;
    if (!view_ || view_->Size() != count) view_ = backend_.View(tensor_, 0, Shape{count});
    return *view_;
  }

 private:
  const TensorBackend& backend_;
  TensorPtr tensor_;
  TensorPtr view_;
};

}  // namespace

bool Float8WireOnDevice(const ITensor& a, const ITensor& b) noexcept {
  const TensorBackend* backend = a.Backend();
  return backend != nullptr && backend == b.Backend() && a.GetDevice() == b.GetDevice() && !a.GetDevice().IsCPU() &&
         a.HostBytes().empty() && b.HostBytes().empty();
}

std::size_t Float8WireDevicePiece(std::size_t parts) noexcept {
  const std::size_t blocks = kDevicePieceBytes / (std::max<std::size_t>(parts, 1) * kFloat8WireBlock);
  return std::max<std::size_t>(blocks, 1) * kFloat8WireBlock;
}

void Float8BlockReduceScatterOnDevice(IProcessGroup& group, const ITensor& input, ITensor& output, std::size_t piece) {
  CheckDevicePiece(piece);
  const auto parts = static_cast<std::size_t>(group.WorldSize());
  const std::size_t count = output.Size();
  piece = std::min(piece, count);
  const TensorBackend& backend = *input.Backend();
  const Device device = input.GetDevice();
  const std::size_t piece_blocks = Float8BlockCount(piece);
  DeviceScratch send_codes(backend, device, parts * piece, DataType::Float8E4M3FN);
  DeviceScratch received_codes(backend, device, parts * piece, DataType::Float8E4M3FN);
  DeviceScratch send_scales(backend, device, parts * piece_blocks, DataType::Float32);
  DeviceScratch received_scales(backend, device, parts * piece_blocks, DataType::Float32);
  // Piece by piece (offsets are whole blocks, so the blocks and their scales are those of the
  // whole chunk): encode this rank's values for every destination, exchange, sum the parts.
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t length = std::min(piece, count - offset);
    const std::size_t blocks = Float8BlockCount(length);
    backend.EncodeFloat8Blocks(input,
                               Float8BlockRuns{.Runs = parts, .Length = length, .Offset = offset, .Stride = count},
                               send_codes.Whole(), send_scales.Whole());
    group.AllToAll(send_codes.First(parts * length), received_codes.First(parts * length));
    group.AllToAll(send_scales.First(parts * blocks), received_scales.First(parts * blocks));
    backend.DecodeSumFloat8Blocks(received_codes.Whole(), received_scales.Whole(), parts, length, output, offset);
  }
}

void Float8BlockAllReduceOnDevice(IProcessGroup& group, ITensor& tensor, std::size_t piece) {
  CheckDevicePiece(piece);
  const auto parts = static_cast<std::size_t>(group.WorldSize());
  const std::size_t count = tensor.Size();
  piece = std::min(piece, count);
  const TensorBackend& backend = *tensor.Backend();
  const Device device = tensor.GetDevice();
  const std::size_t piece_blocks = Float8BlockCount(piece);
  DeviceScratch mine_codes(backend, device, piece, DataType::Float8E4M3FN);
  DeviceScratch all_codes(backend, device, parts * piece, DataType::Float8E4M3FN);
  DeviceScratch mine_scales(backend, device, piece_blocks, DataType::Float32);
  DeviceScratch all_scales(backend, device, parts * piece_blocks, DataType::Float32);
  // Piece by piece, as the reduce-scatter: encode this rank's piece, gather every rank's codes
  // and scales, sum them over the piece itself (the encoder has read it already).
  for (std::size_t offset = 0; offset < count; offset += piece) {
    const std::size_t length = std::min(piece, count - offset);
    const std::size_t blocks = Float8BlockCount(length);
    backend.EncodeFloat8Blocks(tensor, Float8BlockRuns{.Runs = 1, .Length = length, .Offset = offset, .Stride = 0},
                               mine_codes.Whole(), mine_scales.Whole());
    group.AllGather(mine_codes.First(length), all_codes.First(parts * length));
    group.AllGather(mine_scales.First(blocks), all_scales.First(parts * blocks));
    backend.DecodeSumFloat8Blocks(all_codes.Whole(), all_scales.Whole(), parts, length, tensor, offset);
  }
}

}  // namespace mlframework::distributed::detail
