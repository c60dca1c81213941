#include <mlframework/fp8/CurrentScaling.hpp>

#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/fp8/ScaleTable.hpp"

namespace mlframework::fp8 {

namespace {

constexpr char kKind[] = "fp8.CurrentScaling";
constexpr std::uint16_t kVersion = 1;

// @p config, or ArgumentError naming `config.Fp8Format` outside the enum.
const CurrentScalingConfig& Validated(const CurrentScalingConfig& config) {
  if (config.Fp8Format != Format::E4M3 && config.Fp8Format != Format::HYBRID) {
    throw ArgumentError("config.Fp8Format",
                        "value " + std::to_string(static_cast<int>(config.Fp8Format)) + " is not E4M3 or HYBRID");
  }
  return config;
}

}  // namespace

CurrentScaling::CurrentScaling(CurrentScalingConfig config)
    // One history row: the amax of the latest cast.
    : PerTensorScaling(Validated(config).Fp8Format, 1), config_(config) {}

CurrentScaling::~CurrentScaling() = default;
CurrentScaling::CurrentScaling(CurrentScaling&&) noexcept = default;
CurrentScaling& CurrentScaling::operator=(CurrentScaling&&) noexcept = default;

void CurrentScaling::Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                              std::span<const TensorPtr> dst) {
  Float8ScaleUpdate update;
  update.MostRecent = true;
  update.Margin = 0;
  update.KeepScaleOnBadAmax = false;  // Transformer Engine's current scaling: scale 1 then
  update.RollHistory = false;         // the amax stays readable until the next cast
  Table().Quantize(names, src, dst, &update);
}

void CurrentScaling::UpdateScales() {
  // The scales follow every cast; a later Dequantize() still needs the scale_inv of the cast
  // that wrote its input, so there is nothing to advance here (Table() only refuses a moved-from recipe).
  (void)Table();
}

std::vector<std::byte> CurrentScaling::StateDict() const {
  mlframework::detail::BlobWriter writer(kKind, kVersion);
  writer.U8(static_cast<std::uint8_t>(config_.Fp8Format));
  Table().WriteEntries(writer);
  return writer.Finish();
}

void CurrentScaling::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kKind, kVersion);
  Table().ReadFormat(reader);
  const auto columns = Table().ReadEntries(reader);
  reader.ExpectEnd();
  Table().Commit(columns);
}

}  // namespace mlframework::fp8
