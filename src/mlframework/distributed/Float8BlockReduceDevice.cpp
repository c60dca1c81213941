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

// @p piece for @p count elements (no larger than they are); ArgumentError naming `piece` unless
// it is a positive multiple of kFloat8WireBlock (a piece of zero would never end, one across a
// block would change the blocks and so the bits).
std::size_t CheckedPiece(std::size_t piece, std::size_t count) {
  if (piece == 0 || piece % kFloat8WireBlock != 0) {
    throw ArgumentError("piece", "must be a positive multiple of kFloat8WireBlock (" +
                                     std::to_string(kFloat8WireBlock) + "), got " + std::to_string(piece));
  }
  return std::min(piece, count);
}

// What one reduction of @p count elements per destination moves, piece by piece, on the device
// of @p tensor: this rank's codes and scales (for every destination when @p each_destination,
// the reduce-scatter; once, the all-reduce) and every rank's received ones, each sized to one
// piece.
struct DeviceWire {
  DeviceWire(const IProcessGroup& group, const ITensor& tensor, std::size_t count, std::size_t requested_piece,
             bool each_destination)
      : backend(*tensor.Backend()),
        parts(static_cast<std::size_t>(group.WorldSize())),
        per_destination(each_destination),
        piece(CheckedPiece(requested_piece, count)),
        sent_codes(backend, tensor.GetDevice(), (each_destination ? parts : 1) * piece, DataType::Float8E4M3FN),
        received_codes(backend, tensor.GetDevice(), parts * piece, DataType::Float8E4M3FN),
        sent_scales(backend, tensor.GetDevice(), (each_destination ? parts : 1) * Float8BlockCount(piece),
                    DataType::Float32),
        received_scales(backend, tensor.GetDevice(), parts * Float8BlockCount(piece), DataType::Float32) {}

  // Piece by piece (offsets are whole blocks, so the blocks and their scales are those of the
  // whole chunk): encodes @p source (each destination's chunk, or the whole), moves the codes
  // and the scales with @p exchange (sent, received), and sums every rank's part into @p sums.
  template <typename Exchange>
  void Run(const ITensor& source, ITensor& sums, Exchange&& exchange) {
    const std::size_t count = sums.Size();
    const std::size_t runs = per_destination ? parts : 1;
    for (std::size_t offset = 0; offset < count; offset += piece) {
      const std::size_t length = std::min(piece, count - offset);
      const std::size_t blocks = Float8BlockCount(length);
      backend.EncodeFloat8Blocks(
          source,
          Float8BlockRuns{.Runs = runs, .Length = length, .Offset = offset, .Stride = per_destination ? count : 0},
          sent_codes.Whole(), sent_scales.Whole());
      exchange(sent_codes.First(runs * length), received_codes.First(parts * length));
      exchange(sent_scales.First(runs * blocks), received_scales.First(parts * blocks));
      backend.DecodeSumFloat8Blocks(received_codes.Whole(), received_scales.Whole(), parts, length, sums, offset);
    }
  }

  const TensorBackend& backend;
  std::size_t parts;
  bool per_destination;
  std::size_t piece;
  DeviceScratch sent_codes;
  DeviceScratch received_codes;
  DeviceScratch sent_scales;
  DeviceScratch received_scales;
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
  DeviceWire wire(group, input, output.Size(), piece, true);
  // Every destination's chunk encoded, chunk p going to rank p.
  wire.Run(input, output, [&](const ITensor& sent, ITensor& received) { group.AllToAll(sent, received); });
}

void Float8BlockAllReduceOnDevice(IProcessGroup& group, ITensor& tensor, std::size_t piece) {
  DeviceWire wire(group, tensor, tensor.Size(), piece, false);
  // This rank's values encoded once and gathered by every rank, summed over the values
  // themselves (the encoder has read each piece before its sum is written).
  wire.Run(tensor, tensor, [&](const ITensor& sent, ITensor& received) { group.AllGather(sent, received); });
}

}  // namespace mlframework::distributed::detail
