#pragma once
// Private: how core runs the CPU backend's fused kernels on a tensor without a backend whose
// elements the host can address (ITensor::HostBytes()), so such tensors take the same one-pass,
// multi-threaded path as the library's own instead of a chain of per-tensor virtual calls.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

/// A CPU-backend tensor over @p tensor's HostBytes() (an empty one when @p tensor has no
/// elements), holding @p owner; null when @p tensor has a backend, an invalid dtype, or host
/// bytes the CPU kernels cannot take (empty, a size other than `Size() * ElementSize`, a shape of
/// another element count, not aligned to the element size).
TensorPtr HostAlias(const ITensor& tensor, std::shared_ptr<void> owner);

/// @p tensor, or its CPU alias (HostAlias()) when it has no backend: the tensor the fused
/// kernels run on. ArgumentError naming @p name when it has neither a backend nor host elements
/// the CPU kernels can take.
TensorPtr OnABackend(const TensorPtr& tensor, const std::string& name);

/// @p tensors with every entry HostAlias() accepts replaced by its alias (which keeps the entry
/// alive), or nullopt when no entry changes. Entries must be non-null.
std::optional<std::vector<TensorPtr>> WithHostAliases(std::span<const TensorPtr> tensors);

}  // namespace mlframework::detail
