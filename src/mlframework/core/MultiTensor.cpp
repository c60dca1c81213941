#include <mlframework/core/MultiTensor.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/HostAdd.hpp"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework {

namespace {

// Tensors that share one backend (null: the per-tensor fallback), in list order.
struct Group {
  const TensorBackend* backend = nullptr;
  std::vector<std::size_t> indices;
};

void RequireNonNull(std::span<const TensorPtr> tensors, const char* name) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) {
      throw ArgumentNullError(std::string(name) + "[" + std::to_string(i) + "]");
    }
  }
}

// Almost always one group: every tensor of a step comes from one backend.
std::vector<Group> GroupByBackend(std::span<const TensorPtr> tensors) {
  std::vector<Group> groups;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorBackend* backend = tensors[i]->Backend();
    Group* group = nullptr;
    for (Group& g : groups) {
      if (g.backend == backend) {
        group = &g;
      }
    }
    if (group == nullptr) {
      group = &groups.emplace_back(Group{backend, {}});
      group->indices.reserve(tensors.size() - i);
    }
    group->indices.push_back(i);
  }
  return groups;
}

using detail::kObjectPrefetchAhead;
using detail::kParallelWalkTensors;

// The backend a whole list is offered to first: its first tensor's (null for an empty list or a
// null first entry).
const TensorBackend* FirstBackend(std::span<const TensorPtr> tensors) {
  return tensors.empty() || !tensors.front() ? nullptr : tensors.front()->Backend();
}

// The common case in one pass over the list: every tensor non-null and from one backend.
// Returns that backend with `pointers` filled; nullptr when the list is empty, mixes backends
// or holds tensors without one (the caller then takes the general path, which also reports
// null entries). One pass matters for lists of thousands of small tensors.
template <typename Pointer>
const TensorBackend* SingleBackend(std::span<const TensorPtr> tensors, std::vector<Pointer>& pointers) {
  if (tensors.empty() || !tensors[0]) {
    return nullptr;
  }
  const TensorBackend* backend = tensors[0]->Backend();
  if (backend == nullptr) {
    return nullptr;
  }
  pointers.resize(tensors.size());
  int other = 0;  // a null tensor or one of another backend
#pragma omp parallel for schedule(static) reduction(| : other) if (tensors.size() >= kParallelWalkTensors)
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    // Tensor objects lie scattered on the heap: ask for one a few entries ahead so its first
    // cache line (vtable pointer, data, size, dtype) is there when the loop reaches it.
    if (i + kObjectPrefetchAhead < tensors.size()) {
      __builtin_prefetch(tensors[i + kObjectPrefetchAhead].get());
    }
    const ITensor* tensor = tensors[i].get();
    if (tensor == nullptr || tensor->Backend() != backend) {
      other = 1;
    } else {
      pointers[i] = tensors[i].get();
    }
  }
  if (other != 0) {
    pointers.clear();
    return nullptr;
  }
  return backend;
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

double FallbackSumOfSquares(const ITensor& tensor, double factor) { return tensor.SumOfSquares() * factor * factor; }

}  // namespace

std::vector<TensorPtr> TensorList(const GradientMap& gradients) {
  std::vector<TensorPtr> list;
  list.reserve(gradients.size());
  for (const auto& [name, tensor] : gradients) {
    if (!tensor) {
      throw ArgumentNullError("gradients[\"" + name + "\"]");
    }
    list.push_back(tensor);
  }
  return list;
}

// Every operation first offers the whole list to the backend of its first tensor
// (TensorBackend::UnscaleAndCheckList and the like): the CPU backend checks and plans a list of
// its tensors in one walk, and runs a list it has planned twice before without any.

bool UnscaleAndCheck(std::span<const TensorPtr> tensors, float factor) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<bool> found = first->UnscaleAndCheckList(tensors, factor)) {
      return *found;
    }
  }
  std::vector<ITensor*> pointers;
  if (const TensorBackend* backend = SingleBackend(tensors, pointers)) {
    return backend->UnscaleAndCheck(pointers, factor);
  }
  RequireNonNull(tensors, "tensors");
  bool found = false;
  for (const Group& group : GroupByBackend(tensors)) {
    if (group.backend != nullptr) {
      found = group.backend->UnscaleAndCheck(Pointers<ITensor*>(tensors, group.indices), factor) || found;
      continue;
    }
    for (const std::size_t i : group.indices) {
      tensors[i]->MultiplyInPlace(factor);
      found = tensors[i]->HasNonFinite() || found;
    }
  }
  return found;
}

bool HasNonFinite(std::span<const TensorPtr> tensors) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<bool> found = first->HasNonFiniteList(tensors)) {
      return *found;
    }
  }
  std::vector<const ITensor*> pointers;
  if (const TensorBackend* backend = SingleBackend(tensors, pointers)) {
    return backend->HasNonFinite(pointers);
  }
  RequireNonNull(tensors, "tensors");
  for (const Group& group : GroupByBackend(tensors)) {
    if (group.backend != nullptr) {
      if (group.backend->HasNonFinite(Pointers<const ITensor*>(tensors, group.indices))) {
        return true;
      }
      continue;
    }
    for (const std::size_t i : group.indices) {
      if (tensors[i]->HasNonFinite()) {
        return true;  // early exit, as the spec asks
      }
    }
  }
  return false;
}

NonFiniteAndNorm CheckAndSumSquares(std::span<const TensorPtr> tensors, float factor) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<NonFiniteAndNorm> result = first->CheckAndSumSquaresList(tensors, factor)) {
      return *result;
    }
  }
  std::vector<const ITensor*> pointers;
  if (const TensorBackend* backend = SingleBackend(tensors, pointers)) {
    return backend->CheckAndSumSquares(pointers, factor);
  }
  RequireNonNull(tensors, "tensors");
  NonFiniteAndNorm total;
  for (const Group& group : GroupByBackend(tensors)) {
    if (group.backend != nullptr) {
      const NonFiniteAndNorm part =
          group.backend->CheckAndSumSquares(Pointers<const ITensor*>(tensors, group.indices), factor);
      total.FoundNonFinite = total.FoundNonFinite || part.FoundNonFinite;
      total.SumOfSquares += part.SumOfSquares;
      continue;
    }
    for (const std::size_t i : group.indices) {
      total.FoundNonFinite = total.FoundNonFinite || tensors[i]->HasNonFinite();
      total.SumOfSquares += FallbackSumOfSquares(*tensors[i], factor);
    }
  }
  return total;
}

double SumOfSquares(std::span<const TensorPtr> tensors, float factor) {
  return CheckAndSumSquares(tensors, factor).SumOfSquares;
}

void ScaleInPlace(std::span<const TensorPtr> tensors, float factor) {
  if (const TensorBackend* first = FirstBackend(tensors); first != nullptr && first->ScaleList(tensors, factor)) {
    return;
  }
  std::vector<ITensor*> pointers;
  if (const TensorBackend* backend = SingleBackend(tensors, pointers)) {
    backend->Scale(pointers, factor);
    return;
  }
  RequireNonNull(tensors, "tensors");
  for (const Group& group : GroupByBackend(tensors)) {
    if (group.backend != nullptr) {
      group.backend->Scale(Pointers<ITensor*>(tensors, group.indices), factor);
      continue;
    }
    for (const std::size_t i : group.indices) {
      tensors[i]->MultiplyInPlace(factor);
    }
  }
}

namespace {

void RequirePairs(std::span<const TensorPtr> src, std::span<const TensorPtr> dst) {
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
}

// Runs @p fused(backend, src, dst) on runs of pairs whose source and destination share a
// backend, in order, and @p host(i) on every other pair.
template <typename Fused, typename Host>
void ForEachPairRun(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, Fused&& fused, Host&& host) {
  std::vector<const ITensor*> fused_src;
  std::vector<ITensor*> fused_dst;
  const TensorBackend* backend = nullptr;
  auto flush = [&] {
    if (!fused_src.empty()) {
      fused(*backend, std::span<const ITensor* const>(fused_src), std::span<ITensor* const>(fused_dst));
      fused_src.clear();
      fused_dst.clear();
    }
  };
  for (std::size_t i = 0; i < src.size(); ++i) {
    const TensorBackend* pair_backend = src[i]->Backend();
    if (pair_backend != nullptr && pair_backend == dst[i]->Backend()) {
      if (pair_backend != backend) {
        flush();
        backend = pair_backend;
      }
      fused_src.push_back(src[i].get());
      fused_dst.push_back(dst[i].get());
      continue;
    }
    host(i);
  }
  flush();
}

void HostCast(const ITensor& src, ITensor& dst, float factor) {
  std::vector<float> values = src.ToFloatVector();
  if (factor != 1.0f) {
    for (float& v : values) {
      v *= factor;
    }
  }
  dst.CopyFromFloats(values);
}

}  // namespace

bool CastInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  const TensorBackend* first = FirstBackend(src);
  if (first != nullptr) {
    if (const std::optional<bool> found = first->CastIntoKnownLists(src, dst, factor)) {
      return *found;
    }
  }
  RequirePairs(src, dst);
  if (first != nullptr) {
    if (const std::optional<bool> found = first->CastIntoLists(src, dst, factor)) {
      return *found;
    }
  }
  // Pairs whose source and destination share a backend go to its fused kernel.
  bool found = false;
  ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const ITensor* const> s, std::span<ITensor* const> d) {
        found = backend.CastInto(s, d, factor) || found;
      },
      [&](std::size_t i) {
        HostCast(*src[i], *dst[i], factor);
        found = dst[i]->HasNonFinite() || found;
      });
  return found;
}

void CopyInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  RequirePairs(src, dst);
  ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const ITensor* const> s, std::span<ITensor* const> d) {
        backend.CopyInto(s, d, factor);
      },
      [&](std::size_t i) { HostCast(*src[i], *dst[i], factor); });
}

void AddInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float alpha) {
  RequirePairs(src, dst);
  ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const ITensor* const> s, std::span<ITensor* const> d) {
        backend.AddInto(s, d, alpha);
      },
      [&](std::size_t i) { detail::HostAddInto(*src[i], *dst[i], alpha); });
}

std::vector<TensorPtr> Cast(std::span<const TensorPtr> src, DataType dtype, float factor) {
  RequireNonNull(src, "src");
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
  // One contiguous buffer per device, so later fused passes over the result stream it like one
  // flat tensor.
  std::vector<TensorPtr> dst = ZerosContiguousLike(src, dtype);
  CastInto(src, dst, factor);
  return dst;
}

}  // namespace mlframework
