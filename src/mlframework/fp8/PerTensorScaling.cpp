#include <mlframework/fp8/PerTensorScaling.hpp>

#include "mlframework/core/Validation.hpp"
#include "mlframework/fp8/ScaleTable.hpp"

namespace mlframework::fp8 {

PerTensorScaling::PerTensorScaling(Format format, std::size_t history_rows)
    : table_(std::make_unique<detail::ScaleTable>(format, history_rows)) {}

PerTensorScaling::~PerTensorScaling() = default;
PerTensorScaling::PerTensorScaling(PerTensorScaling&&) noexcept = default;
PerTensorScaling& PerTensorScaling::operator=(PerTensorScaling&&) noexcept = default;

detail::ScaleTable& PerTensorScaling::Table() const { return mlframework::detail::Live(table_, Name()); }

void PerTensorScaling::Register(const std::string& name, TensorRole role, const ITensor& like) {
  Table().Register(name, role, like);
}

bool PerTensorScaling::IsRegistered(const std::string& name) const { return Table().IsRegistered(name); }

std::vector<std::string> PerTensorScaling::Names() const { return Table().Names(); }

DataType PerTensorScaling::Float8TypeOf(const std::string& name) const { return Table().Find(name).dtype; }

void PerTensorScaling::Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                                  std::span<const TensorPtr> dst) const {
  Table().Dequantize(names, src, dst);
}

TensorPtr PerTensorScaling::Scale(const std::string& name) const { return Table().View(name, Table().ScaleRow()); }

TensorPtr PerTensorScaling::ScaleInv(const std::string& name) const {
  return Table().View(name, Table().ScaleInvRow());
}

TensorPtr PerTensorScaling::Amax(const std::string& name) const { return Table().View(name, 0); }

}  // namespace mlframework::fp8
