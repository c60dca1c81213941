// Fuzz target: FSDP shard checkpoints (FSDP::LoadStateDict on a world of one).
//
// The harness saves a real checkpoint of a two-unit model and lets the input
// damage it: the blob a user would actually feed back, truncated, bit-flipped,
// extended, its checksum re-sealed or not, so the fuzzer spends its time past
// the frame checks, in the unit records.
//
// Properties: a damaged checkpoint is accepted or rejected with ArgumentError;
// a rejected one leaves every shard as it was (same StateDict); an accepted one
// saves back to exactly the bytes that were loaded.
//
// Input: byte 0 flags (bit 0: re-seal the checksum, bit 1: truncate, bit 2:
// append the rest of the input), bytes 1-2 the truncated length (little
// endian), then edits of three bytes each (offset low, offset high, XOR mask)
// until a zero mask.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

#include "FuzzSupport.hpp"

using namespace mlframework;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

std::unique_ptr<fsdp::FSDP> MakeModel() {
  auto model = std::make_unique<fsdp::FSDP>(distributed::MakeLocalProcessGroup());
  model->RegisterUnit("layer1", {{"weight", FromVector({0.5f, -1.0f, 2.0f, 0.25f, 3.0f, -0.75f}, {2, 3})},
                                 {"bias", FromVector({0.1f, 0.2f, 0.3f}, {3})}});
  model->RegisterUnit("head", {{"weight", FromVector({1.0f, 2.0f, 3.0f}, {3, 1}, DataType::Float16)}});
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlframework::fuzz::FuzzInput input(data, size);
  const std::uint8_t flags = input.Byte();
  const std::size_t truncate_to = input.Byte() | (static_cast<std::size_t>(input.Byte()) << 8);

  const std::unique_ptr<fsdp::FSDP> model = MakeModel();
  std::vector<std::byte> blob = model->StateDict();
  for (;;) {
    const std::size_t offset = input.Byte() | (static_cast<std::size_t>(input.Byte()) << 8);
    const std::uint8_t mask = input.Byte();
    if (mask == 0) {
      break;
    }
    blob[offset % blob.size()] ^= static_cast<std::byte>(mask);
  }
  if ((flags & 2U) != 0 && truncate_to < blob.size()) {
    blob.resize(truncate_to);
  }
  if ((flags & 4U) != 0) {
    for (const std::byte b : input.Rest()) {
      blob.push_back(b);
    }
  }
  if ((flags & 1U) != 0) {
    mlframework::fuzz::ResealChecksum(blob);
  }

  // Load into a model whose shards differ from the saved ones, so "unchanged" is visible.
  const std::unique_ptr<fsdp::FSDP> target = MakeModel();
  fsdp::FSDPShardingUnit& unit = target->Unit(0);
  unit.LocalShard()->MultiplyInPlace(3.0f);
  const std::vector<std::byte> before = target->StateDict();
  try {
    target->LoadStateDict(blob);
  } catch (const ArgumentError&) {
    if (target->StateDict() != before) {
      mlframework::fuzz::PropertyFailed("a rejected checkpoint changed the shards");
    }
    return 0;
  }
  if (target->StateDict() != blob) {
    mlframework::fuzz::PropertyFailed("an accepted checkpoint does not save back to the same bytes");
  }
  return 0;
}
