#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/HostAlias.hpp"
#include "mlframework/core/TensorGroups.hpp"

// The amax forms of MultiTensor.hpp's write passes (the read pass, CheckAndAmax(), is
// MultiTensor.cpp's). They take the same route as the plain
// passes: the whole list to its first tensor's backend, else host aliases for tensors without a
// backend that the host addresses, else each backend's share of the list, and the per-tensor float vectors for
// the rest.

namespace mlframework {

namespace {

using detail::BackendGroup;
using detail::FirstBackend;
using detail::GroupByBackend;
using detail::Pointers;
using detail::RequireNonNull;

void Fold(NonFiniteAndAmax& total, const NonFiniteAndAmax& part) {
  total.FoundNonFinite = total.FoundNonFinite || part.FoundNonFinite;
  total.Amax = std::max(total.Amax, part.Amax);
}

// Multiplies @p values by @p factor (not at all for 1, which keeps NaN payloads) and returns
// the non-finite flag and the amax of the products.
NonFiniteAndAmax ScaleFloats(std::span<float> values, float factor) {
  NonFiniteAndAmax result;
  for (float& v : values) {
    if (factor != 1.0f) {
      v *= factor;
    }
    const float a = std::fabs(v);
    if (std::isfinite(a)) {
      result.Amax = std::max(result.Amax, a);
    } else {
      result.FoundNonFinite = true;
    }
  }
  return result;
}

// `dst = round(src * factor)` through one float buffer for tensors no backend takes: the check
// is of what @p dst holds afterwards (narrowing can overflow where the FP32 product did not).
NonFiniteAndAmax HostCastAndAmax(const ITensor& src, ITensor& dst, float factor) {
  std::vector<float> values = src.ToFloatVector();
  NonFiniteAndAmax result = ScaleFloats(values, factor);
  dst.CopyFromFloats(values);
  if (dst.GetDataType() != DataType::Float32) {
    result.FoundNonFinite = dst.HasNonFinite();
  }
  return result;
}

}  // namespace

NonFiniteAndAmax UnscaleCheckAndAmax(std::span<const TensorPtr> tensors, float factor) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<NonFiniteAndAmax> result = first->UnscaleCheckAndAmaxList(tensors, factor)) {
      return *result;
    }
  }
  RequireNonNull(tensors, "tensors");
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    return UnscaleCheckAndAmax(*aliased, factor);
  }
  NonFiniteAndAmax total;
  for (const BackendGroup& group : GroupByBackend(tensors)) {
    if (group.backend != nullptr) {
      Fold(total, group.backend->UnscaleCheckAndAmax(Pointers<ITensor*>(tensors, group.indices), factor));
      continue;
    }
    for (const std::size_t i : group.indices) {
      Fold(total, HostCastAndAmax(*tensors[i], *tensors[i], factor));
    }
  }
  return total;
}

NonFiniteAndAmax CastIntoAndAmax(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  detail::RequirePairs(src, dst);
  if (const TensorBackend* first = FirstBackend(src)) {
    if (const std::optional<NonFiniteAndAmax> result = first->CastIntoAndAmaxLists(src, dst, factor)) {
      return *result;
    }
  }
  if (const std::optional<detail::AliasedPairs> aliased = detail::WithHostAliases(src, dst)) {
    return CastIntoAndAmax(aliased->src, aliased->dst, factor);
  }
  NonFiniteAndAmax total;
  detail::ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const ITensor* const> s, std::span<ITensor* const> d) {
        Fold(total, backend.CastIntoAndAmax(s, d, factor));
      },
      [&](std::size_t i) { Fold(total, HostCastAndAmax(*src[i], *dst[i], factor)); });
  return total;
}

}  // namespace mlframework
