#include <mlframework/fp8/PerTensorScaling.hpp>

#include "mlframework/fp8/ScaleTable.hpp"

namespace mlframework::fp8 {

PerTensorScaling::PerTensorScaling(Format format, std::size_t history_rows)
    : table_(std::make_unique<detail::ScaleTable>(format, history_rows)) {}

PerTensorScaling::~PerTensorScaling() = default;
PerTensorScaling::PerTensorScaling(PerTensorScaling&&) noexcept = default;
PerTensorScaling& PerTensorScaling::operator=(PerTensorScaling&&) noexcept = default;

void PerTensorScaling::Register(const std::string& name, TensorRole role, const ITensor& like) {
  table_->Register(name, role, like);
}

bool PerTensorScaling::IsRegistered(const std::string& name) const { return table_->IsRegistered(name); }

std::vector<std::string> PerTensorScaling::Names() const { return table_->Names(); }

DataType PerTensorScaling::Float8TypeOf(const std::string& name) const { return table_->Find(name).dtype; }

void PerTensorScaling::Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                                  std::span<const TensorPtr> dst) const {
  table_->Dequantize(names, src, dst);
}

TensorPtr PerTensorScaling::Scale(const std::string& name) const { return table_->View(name, table_->ScaleRow()); }

TensorPtr PerTensorScaling::ScaleInv(const std::string& name) const {
  return table_->View(name, table_->ScaleInvRow());
}

TensorPtr PerTensorScaling::Amax(const std::string& name) const { return table_->View(name, 0); }

}  // namespace mlframework::fp8
