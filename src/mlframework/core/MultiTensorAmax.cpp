#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/HostAlias.hpp"

// The amax forms of MultiTensor.hpp's check passes. They take the same route as the plain
// passes: the whole list to its first tensor's backend, else host aliases for tensors without a
// backend that the host addresses, else runs of one backend, and the per-tensor float vectors for
// the rest.

namespace mlframework {

namespace {

void RequireNonNull(std::span<const TensorPtr> tensors, const char* name) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) {
      throw ArgumentNullError(std::string(name) + "[" + std::to_string(i) + "]");
    }
  }
}

const TensorBackend* FirstBackend(std::span<const TensorPtr> tensors) {
  return tensors.empty() || !tensors.front() ? nullptr : tensors.front()->Backend();
}

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

// Runs @p run(backend, indices) over the runs of @p tensors that share a backend, in list order,
// and @p host(i) over the tensors without one.
template <typename Run, typename Host>
void ForEachGroup(std::span<const TensorPtr> tensors, Run&& run, Host&& host) {
  std::vector<std::size_t> indices;
  const TensorBackend* backend = nullptr;
  const auto flush = [&] {
    if (!indices.empty()) {
      run(*backend, indices);
      indices.clear();
    }
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorBackend* own = tensors[i]->Backend();
    if (own == nullptr) {
      host(i);
      continue;
    }
    if (own != backend) {
      flush();
      backend = own;
    }
    indices.push_back(i);
  }
  flush();
}

template <typename Pointer>
std::vector<Pointer> Pointers(std::span<const TensorPtr> tensors, const std::vector<std::size_t>& indices) {
  std::vector<Pointer> pointers;
  pointers.reserve(indices.size());
  for (const std::size_t i : indices) {
    pointers.push_back(tensors[i].get());
  }
  return pointers;
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
  ForEachGroup(
      tensors,
      [&](const TensorBackend& backend, const std::vector<std::size_t>& indices) {
        Fold(total, backend.UnscaleCheckAndAmax(Pointers<ITensor*>(tensors, indices), factor));
      },
      [&](std::size_t i) { Fold(total, HostCastAndAmax(*tensors[i], *tensors[i], factor)); });
  return total;
}

NonFiniteAndAmax CheckAndAmax(std::span<const TensorPtr> tensors) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<NonFiniteAndAmax> result = first->CheckAndAmaxList(tensors)) {
      return *result;
    }
  }
  RequireNonNull(tensors, "tensors");
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    return CheckAndAmax(*aliased);
  }
  NonFiniteAndAmax total;
  ForEachGroup(
      tensors,
      [&](const TensorBackend& backend, const std::vector<std::size_t>& indices) {
        Fold(total, backend.CheckAndAmax(Pointers<const ITensor*>(tensors, indices)));
      },
      [&](std::size_t i) {
        std::vector<float> values = tensors[i]->ToFloatVector();
        Fold(total, ScaleFloats(values, 1.0f));
      });
  return total;
}

NonFiniteAndAmax CastIntoAndAmax(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  RequireNonNull(src, "src");
  RequireNonNull(dst, "dst");
  if (src.size() != dst.size()) {
    throw ArgumentError("dst",
                        "has " + std::to_string(dst.size()) + " tensors but src has " + std::to_string(src.size()));
  }
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i]->GetShape() != dst[i]->GetShape()) {
      throw ArgumentError(
          "dst[" + std::to_string(i) + "]",
          "shape " + ToString(dst[i]->GetShape()) + " differs from src shape " + ToString(src[i]->GetShape()));
    }
  }
  if (const TensorBackend* first = FirstBackend(src)) {
    if (const std::optional<NonFiniteAndAmax> result = first->CastIntoAndAmaxLists(src, dst, factor)) {
      return *result;
    }
  }
  std::optional<std::vector<TensorPtr>> aliased_src = detail::WithHostAliases(src);
  std::optional<std::vector<TensorPtr>> aliased_dst = detail::WithHostAliases(dst);
  if (aliased_src || aliased_dst) {
    const std::vector<TensorPtr> s =
        aliased_src ? std::move(*aliased_src) : std::vector<TensorPtr>(src.begin(), src.end());
    const std::vector<TensorPtr> d =
        aliased_dst ? std::move(*aliased_dst) : std::vector<TensorPtr>(dst.begin(), dst.end());
    return CastIntoAndAmax(s, d, factor);
  }
  // Runs of pairs whose source and destination share a backend go to its fused kernel.
  NonFiniteAndAmax total;
  std::vector<const ITensor*> run_src;
  std::vector<ITensor*> run_dst;
  const TensorBackend* backend = nullptr;
  const auto flush = [&] {
    if (!run_src.empty()) {
      Fold(total, backend->CastIntoAndAmax(run_src, run_dst, factor));
      run_src.clear();
      run_dst.clear();
    }
  };
  for (std::size_t i = 0; i < src.size(); ++i) {
    const TensorBackend* pair_backend = src[i]->Backend();
    if (pair_backend != nullptr && pair_backend == dst[i]->Backend()) {
      if (pair_backend != backend) {
        flush();
        backend = pair_backend;
      }
      run_src.push_back(src[i].get());
      run_dst.push_back(dst[i].get());
      continue;
    }
    Fold(total, HostCastAndAmax(*src[i], *dst[i], factor));
  }
  flush();
  return total;
}

}  // namespace mlframework
