// Fuzz target: resharding FSDP checkpoints (FSDP::LoadShardedCheckpoint).
//
// The harness saves a real checkpoint at three simulated ranks (two units, AdamW state after
// one step, a loss scaler's state; or, with flag bit 5, one unit of 192 elements whose AdamW
// moments are 8-bit block-scaled codes in blocks of 32 (with flag bit 7 too, block-scaled FP16
// codes), so the shards at 3, 2 and 1 ranks fall on
// whole blocks and the codes and scales reshard bit for bit; with flag bit 6, either model with
// BF16 master shards whose exact FP32 masters keep 16-bit remainders, so each unit records its
// shard dtype, master format, BF16 values and remainders) and lets the input damage one rank's blob, or drop or
// duplicate it, as a broken file system or a mixed-up directory would; a simulated rank 0 of
// two loads the set. The blobs are re-sealed on request, so the fuzzer gets past the checksum
// into the metadata (layouts, ranges, optimizer and scaler records, state formats, block sizes,
// codes and scales).
//
// Properties: a damaged set is accepted or rejected with ArgumentError; a rejected one leaves
// the loader's shards, optimizer state and scaler as they were; an accepted one leaves a state
// that saves, reshards to one rank and back, and loads again to the same state.
//
// Input: byte 0 flags (bit 0: re-seal the checksum, bit 1: truncate, bit 2: append the rest of
// the input, bit 3: drop the damaged blob, bit 4: put the damaged blob in place of the next
// one too, bit 5: the 8-bit model, bit 6: BF16 master shards with remainders, bit 7 with bit 5: its
// moments in FP16 blocks), byte 1 the blob to damage (mod 3), bytes
// 2-3 the truncated length (little endian), then edits of three bytes each (offset low, offset high, XOR mask) until a
// zero mask.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "FuzzSupport.hpp"

using namespace mlframework;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

// Rank `rank` of `world`, alone in this process: agreement all-reduces see this rank's values.
class SimulatedRank final : public distributed::IProcessGroup {
 public:
  SimulatedRank(int rank, int world) : rank_(rank), world_(world) {}
  int Rank() const noexcept override { return rank_; }
  int WorldSize() const noexcept override { return world_; }
  std::string_view BackendName() const noexcept override { return "simulated"; }
  void AllGather(const ITensor& /*input*/, ITensor& /*output*/) override { Refuse(); }
  void ReduceScatter(const ITensor& /*input*/, ITensor& /*output*/, distributed::ReduceOp /*op*/) override { Refuse(); }
  void AllReduce(ITensor& /*tensor*/, distributed::ReduceOp /*op*/) override { Refuse(); }
  void Broadcast(ITensor& /*tensor*/, int /*root*/) override {}
  void Barrier() override {}
  void AllReduceHost(std::span<double> /*values*/, distributed::ReduceOp /*op*/) override {}
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& /*message*/) noexcept override {
    mlframework::fuzz::PropertyFailed("a checkpoint load aborted the job");
  }

 private:
  [[noreturn]] static void Refuse() { throw InvalidOperationError("no data moves between simulated ranks"); }
  int rank_;
  int world_;
};

struct Rank {
  std::unique_ptr<fsdp::FSDP> model;
  std::unique_ptr<optimizers::Adam> adam;
  amp::DynamicLossScaler scaler;

  Rank(int rank, int world, float amplitude, bool low_bit, bool bf16_masters, bool half) {
    model = std::make_unique<fsdp::FSDP>(
        std::make_shared<SimulatedRank>(rank, world),
        fsdp::FSDPConfig{.MasterDType = bf16_masters ? DataType::BFloat16 : DataType::Float32});
    optimizers::AdamOptions options = optimizers::AdamOptions::AdamW();
    if (bf16_masters) options.Masters = MasterFormat::BFloat16Remainder;
    if (low_bit) {
      std::vector<float> weights(192);
      for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
      model->RegisterUnit("blocks", {{"weight", FromVector(weights, {6, 32})}});
      options.FirstMomentFormat = half ? StateFormat::Float16 : StateFormat::Int8Block;
      options.SecondMomentFormat = half ? StateFormat::Float16 : StateFormat::UInt8Block;
      options.StateBlockSize = 32;
    } else {
      model->RegisterUnit("layer1", {{"weight", FromVector({0.5f, -1.0f, 2.0f, 0.25f, 3.0f, -0.75f}, {2, 3})},
                                     {"bias", FromVector({0.1f, 0.2f, 0.3f}, {3})}});
      model->RegisterUnit("head", {{"weight", FromVector({1.0f, 2.0f, 3.0f, 4.0f}, {4, 1})}});
    }
    for (std::size_t u = 0; u < model->UnitCount(); ++u) model->Unit(u).LocalShard()->MultiplyInPlace(amplitude);
    adam = std::make_unique<optimizers::Adam>(model->ShardedParameters(), options);
  }
  fsdp::ShardedCheckpointContents Contents() {
    return {.Optimizer = adam.get(), .Scaler = fsdp::BlobState::Of(scaler)};
  }
  std::vector<std::byte> Snapshot() { return model->SaveShardedCheckpoint(Contents()); }
};

std::vector<std::vector<std::byte>> SavedAtThree(bool low_bit, bool bf16_masters, bool half) {
  std::vector<std::vector<std::byte>> blobs;
  for (int r = 0; r < 3; ++r) {
    Rank rank(r, 3, 1.0f, low_bit, bf16_masters, half);
    for (std::size_t u = 0; u < rank.model->UnitCount(); ++u) {
      fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
      rank.model->Unit(u).SetLocalGradient(
          FromVector(std::vector<float>(unit.ShardSize(), 0.25f * static_cast<float>(u + 1)), {unit.ShardSize()}));
    }
    rank.model->Step(*rank.adam);
    rank.scaler.UpdateScale(true);
    fsdp::ShardedCheckpointContents contents = rank.Contents();
    contents.Step = 12;
    blobs.push_back(rank.model->SaveShardedCheckpoint(contents));
  }
  return blobs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlframework::fuzz::FuzzInput input(data, size);
  const std::uint8_t flags = input.Byte();
  const std::size_t victim = input.Byte() % 3U;
  const std::size_t truncate_to = input.Byte() | (static_cast<std::size_t>(input.Byte()) << 8);

  const bool low_bit = (flags & 32U) != 0;
  const bool bf16 = (flags & 64U) != 0;
  const bool half = low_bit && (flags & 128U) != 0;
  // Indexed by low_bit + 2 * bf16 + 4 * half.
  static const std::vector<std::vector<std::vector<std::byte>>> kSaved{SavedAtThree(false, false, false),
                                                                       SavedAtThree(true, false, false),
                                                                       SavedAtThree(false, true, false),
                                                                       SavedAtThree(true, true, false),
                                                                       {},
                                                                       SavedAtThree(true, false, true),
                                                                       {},
                                                                       SavedAtThree(true, true, true)};
  std::vector<std::vector<std::byte>> blobs = kSaved[(low_bit ? 1U : 0U) + (bf16 ? 2U : 0U) + (half ? 4U : 0U)];
  std::vector<std::byte>& blob = blobs[victim];
  for (;;) {
    const std::size_t offset = input.Byte() | (static_cast<std::size_t>(input.Byte()) << 8);
    const std::uint8_t mask = input.Byte();
    if (mask == 0) break;
    blob[offset % blob.size()] ^= static_cast<std::byte>(mask);
  }
  if ((flags & 2U) != 0 && truncate_to < blob.size()) blob.resize(truncate_to);
  if ((flags & 4U) != 0) {
    for (const std::byte b : input.Rest()) blob.push_back(b);
  }
  if ((flags & 1U) != 0) mlframework::fuzz::ResealChecksum(blob);
  if ((flags & 16U) != 0) blobs[(victim + 1) % 3] = blob;
  if ((flags & 8U) != 0) blobs.erase(blobs.begin() + static_cast<std::ptrdiff_t>(victim));

  // Load into rank 0 of 2 whose state differs from the saved one, so "unchanged" is visible.
  Rank target(0, 2, 3.0f, low_bit, bf16, half);
  const std::vector<std::byte> before = target.Snapshot();
  const std::vector<std::byte> scaler_before = target.scaler.StateDict();
  try {
    static_cast<void>(target.model->LoadShardedCheckpoint(blobs, target.Contents()));
  } catch (const ArgumentError&) {
    if (target.Snapshot() != before || target.scaler.StateDict() != scaler_before) {
      mlframework::fuzz::PropertyFailed("a rejected checkpoint changed the loader's state");
    }
    return 0;
  }
  // Accepted: rank 1 of 2 accepts the same set (the checks do not depend on the rank), and the
  // two ranks' state saves, loads at world size 1, saves and loads at 2 again to the same state.
  const std::vector<std::byte> loaded = target.Snapshot();
  Rank other(1, 2, 3.0f, low_bit, bf16, half);
  static_cast<void>(other.model->LoadShardedCheckpoint(blobs, other.Contents()));
  Rank single(0, 1, 5.0f, low_bit, bf16, half);
  static_cast<void>(single.model->LoadShardedCheckpoint(
      std::vector<std::vector<std::byte>>{target.Snapshot(), other.Snapshot()}, single.Contents()));
  Rank back(0, 2, 7.0f, low_bit, bf16, half);
  static_cast<void>(
      back.model->LoadShardedCheckpoint(std::vector<std::vector<std::byte>>{single.Snapshot()}, back.Contents()));
  if (back.Snapshot() != loaded || back.scaler.StateDict() != target.scaler.StateDict()) {
    mlframework::fuzz::PropertyFailed("an accepted checkpoint does not survive a save and load");
  }
  return 0;
}
