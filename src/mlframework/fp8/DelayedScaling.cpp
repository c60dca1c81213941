#include <mlframework/fp8/DelayedScaling.hpp>

#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/fp8/ScaleTable.hpp"

namespace mlframework::fp8 {

namespace {

constexpr char kDelayedScalingKind[] = "fp8.DelayedScaling";
constexpr std::uint16_t kDelayedScalingVersion = 1;

// @p config, or ArgumentError naming its first invalid field (before any state is made).
const DelayedScalingConfig& Validated(const DelayedScalingConfig& config) {
  if (config.AmaxHistoryLen == 0) {
    throw ArgumentError("config.AmaxHistoryLen", "is 0; the amax history holds at least one step");
  }
  if (config.AmaxHistoryLen > detail::kMaxAmaxHistory) {
    throw ArgumentError("config.AmaxHistoryLen", std::to_string(config.AmaxHistoryLen) + " is above " +
                                                     std::to_string(detail::kMaxAmaxHistory) +
                                                     ": the state's rows (H + 4) would not fit a size_t");
  }
  if (config.Margin < 0 || config.Margin > kMaxFloat8Margin) {
    throw ArgumentError("config.Margin",
                        std::to_string(config.Margin) + " is outside [0, " + std::to_string(kMaxFloat8Margin) + "]");
  }
  if (config.Fp8Format != Format::E4M3 && config.Fp8Format != Format::HYBRID) {
    throw ArgumentError("config.Fp8Format",
                        "value " + std::to_string(static_cast<int>(config.Fp8Format)) + " is not E4M3 or HYBRID");
  }
  if (config.AmaxComputeAlgo != AmaxComputeAlgorithm::Max &&
      config.AmaxComputeAlgo != AmaxComputeAlgorithm::MostRecent) {
    throw ArgumentError("config.AmaxComputeAlgo", "value " + std::to_string(static_cast<int>(config.AmaxComputeAlgo)) +
                                                      " is not Max or MostRecent");
  }
  return config;
}

}  // namespace

AmaxComputeAlgorithm ParseAmaxComputeAlgo(std::string_view name) {
  if (name == "max") return AmaxComputeAlgorithm::Max;
  if (name == "most_recent") return AmaxComputeAlgorithm::MostRecent;
  throw ArgumentError("amax_compute_algo", "'" + std::string(name) + "' is not 'max' or 'most_recent'");
}

std::string_view ToString(AmaxComputeAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case AmaxComputeAlgorithm::Max:
      return "max";
    case AmaxComputeAlgorithm::MostRecent:
      return "most_recent";
  }
  return "unknown";
}

DelayedScaling::DelayedScaling(DelayedScalingConfig config)
    : PerTensorScaling(Validated(config).Fp8Format, config.AmaxHistoryLen), config_(config) {}

DelayedScaling::~DelayedScaling() = default;
DelayedScaling::DelayedScaling(DelayedScaling&&) noexcept = default;
DelayedScaling& DelayedScaling::operator=(DelayedScaling&&) noexcept = default;

std::vector<float> DelayedScaling::AmaxHistory(const std::string& name) const { return Table().Read(name).history; }

void DelayedScaling::Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                              std::span<const TensorPtr> dst) {
  Table().Quantize(names, src, dst, nullptr);
}

void DelayedScaling::UpdateScales() {
  Float8ScaleUpdate update;
  update.MostRecent = config_.AmaxComputeAlgo == AmaxComputeAlgorithm::MostRecent;
  update.Margin = config_.Margin;
  update.KeepScaleOnBadAmax = true;
  update.RollHistory = true;
  Table().UpdateAll(update);
}

std::vector<std::byte> DelayedScaling::StateDict() const {
  mlframework::detail::BlobWriter writer(kDelayedScalingKind, kDelayedScalingVersion);
  writer.U64(config_.AmaxHistoryLen);
  writer.U8(static_cast<std::uint8_t>(config_.AmaxComputeAlgo));
  writer.I64(config_.Margin);
  writer.U8(static_cast<std::uint8_t>(config_.Fp8Format));
  Table().WriteEntries(writer);
  return writer.Finish();
}

void DelayedScaling::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kDelayedScalingKind, kDelayedScalingVersion);
  const std::uint64_t history = reader.U64();
  if (history != config_.AmaxHistoryLen) {
    reader.Fail("amax history length " + std::to_string(history) + " differs from this recipe's " +
                std::to_string(config_.AmaxHistoryLen));
  }
  const std::uint8_t algorithm = reader.U8();
  if (algorithm != static_cast<std::uint8_t>(config_.AmaxComputeAlgo)) {
    reader.Fail("amax_compute_algo " + std::string(ToString(static_cast<AmaxComputeAlgorithm>(algorithm))) +
                " differs from this recipe's " + std::string(ToString(config_.AmaxComputeAlgo)));
  }
  const std::int64_t margin = reader.I64();
  if (margin != config_.Margin) {
    reader.Fail("margin " + std::to_string(margin) + " differs from this recipe's " + std::to_string(config_.Margin));
  }
  Table().ReadFormat(reader);
  const auto columns = Table().ReadEntries(reader);
  reader.ExpectEnd();
  Table().Commit(columns);
}

}  // namespace mlframework::fp8
