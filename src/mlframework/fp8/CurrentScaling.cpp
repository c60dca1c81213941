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

}  // namespace

CurrentScaling::CurrentScaling(CurrentScalingConfig config) : config_(config) {
  if (config_.Fp8Format != Format::E4M3 && config_.Fp8Format != Format::HYBRID) {
    throw ArgumentError("config.Fp8Format",
                        "value " + std::to_string(static_cast<int>(config_.Fp8Format)) + " is not E4M3 or HYBRID");
  }
  // One history row: the amax of the latest cast.
  table_ = std::make_unique<detail::ScaleTable>(config_.Fp8Format, 1);
}

CurrentScaling::~CurrentScaling() = default;
CurrentScaling::CurrentScaling(CurrentScaling&&) noexcept = default;
CurrentScaling& CurrentScaling::operator=(CurrentScaling&&) noexcept = default;

void CurrentScaling::Register(const std::string& name, TensorRole role, const ITensor& like) {
  table_->Register(name, role, like);
}

bool CurrentScaling::IsRegistered(const std::string& name) const { return table_->IsRegistered(name); }

std::vector<std::string> CurrentScaling::Names() const { return table_->Names(); }

DataType CurrentScaling::Float8TypeOf(const std::string& name) const { return table_->Find(name).dtype; }

void CurrentScaling::Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                              std::span<const TensorPtr> dst) {
  Float8ScaleUpdate update;
  update.MostRecent = true;
  update.Margin = 0;
  update.KeepScaleOnBadAmax = false;  // Transformer Engine's current scaling: scale 1 then
  update.RollHistory = false;         // the amax stays readable until the next cast
  table_->Quantize(names, src, dst, &update);
}

void CurrentScaling::Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                                std::span<const TensorPtr> dst) const {
  table_->Dequantize(names, src, dst);
}

void CurrentScaling::UpdateScales() {
  // The scales follow every cast; a later Dequantize() still needs the scale_inv of the cast
  // that wrote its input, so there is nothing to advance here.
}

TensorPtr CurrentScaling::Scale(const std::string& name) const { return table_->View(name, table_->ScaleRow()); }

TensorPtr CurrentScaling::ScaleInv(const std::string& name) const { return table_->View(name, table_->ScaleInvRow()); }

TensorPtr CurrentScaling::Amax(const std::string& name) const { return table_->View(name, 0); }

std::vector<std::byte> CurrentScaling::StateDict() const {
  mlframework::detail::BlobWriter writer(kKind, kVersion);
  writer.U8(static_cast<std::uint8_t>(config_.Fp8Format));
  table_->WriteEntries(writer);
  return writer.Finish();
}

void CurrentScaling::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kKind, kVersion);
  const std::uint8_t format = reader.U8();
  if (format != static_cast<std::uint8_t>(config_.Fp8Format)) {
    reader.Fail("format " + std::string(ToString(static_cast<Format>(format))) + " differs from this recipe's " +
                std::string(ToString(config_.Fp8Format)));
  }
  const auto columns = table_->ReadEntries(reader);
  reader.ExpectEnd();
  table_->Commit(columns);
}

}  // namespace mlframework::fp8
