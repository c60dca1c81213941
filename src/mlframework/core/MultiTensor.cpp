#include <mlframework/core/MultiTensor.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostConversion.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/Threads.hpp>

#include "mlframework/core/HostAdd.hpp"
#include "mlframework/core/HostAlias.hpp"
#include "mlframework/core/TensorGroups.hpp"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework {

namespace {

using detail::AliasedPairs;
using detail::BackendGroup;
using detail::FirstBackend;
using detail::ForEachPairRun;
using detail::GroupByBackend;
using detail::kObjectPrefetchAhead;
using detail::kParallelWalkTensors;
using detail::Pointers;
using detail::RequireNonNull;
using detail::RequirePairs;

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
#pragma omp parallel for schedule(static) reduction(|        \
                                                    : other) \
    num_threads(NumThreads()) if (tensors.size() >= kParallelWalkTensors)
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
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    return UnscaleAndCheck(*aliased, factor);
  }
  bool found = false;
  for (const BackendGroup& group : GroupByBackend(tensors)) {
    if (group.backend != nullptr) {
      found = group.backend->UnscaleAndCheck(Pointers<ITensor*>(tensors, group.indices), factor) || found;
      continue;
    }
    for (const std::size_t i : group.indices) {
      found = tensors[i]->UnscaleAndCheck(factor) || found;
    }
  }
  return found;
}

namespace {

// The entries of @p tensors at @p indices, for a backend's share of a list that mixes backends.
std::vector<TensorPtr> Members(std::span<const TensorPtr> tensors, const std::vector<std::size_t>& indices) {
  std::vector<TensorPtr> members;
  members.reserve(indices.size());
  for (const std::size_t i : indices) {
    members.push_back(tensors[i]);
  }
  return members;
}

// The one route of every read pass: the whole list to the backend of its first tensor, which
// runs it when it knows the list (the CPU backend's kept plans); else the list grouped by backend
// once, each group to its backend, and the tensors without one through their ITensor members.
ReadPassResult ReadPass(std::span<const TensorPtr> tensors, const ReadPassOptions& options) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<ReadPassResult> result = first->Read({tensors, false}, options)) {
      return *result;
    }
  }
  RequireNonNull(tensors, "tensors");
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    return ReadPass(*aliased, options);
  }
  const std::vector<BackendGroup> groups = GroupByBackend(tensors);
  ReadPassResult total;
  for (const BackendGroup& group : groups) {
    std::vector<TensorPtr> members;
    std::span<const TensorPtr> list = tensors;
    if (groups.size() > 1) {
      members = Members(tensors, group.indices);
      list = members;
    }
    ReadPassResult part;
    if (group.backend == nullptr) {
      part = detail::ReadEachTensor(list, options);
    } else if (const std::optional<ReadPassResult> result = group.backend->Read({list, true}, options)) {
      part = *result;
    } else {
      throw InvalidOperationError("the " + std::string(group.backend->Name()) +
                                  " backend declined a read pass over its own tensors");
    }
    total.FoundNonFinite = total.FoundNonFinite || part.FoundNonFinite;
    total.SumOfSquares += part.SumOfSquares;
    total.Amax = std::max(total.Amax, part.Amax);
    if (total.FoundNonFinite && !options.SumOfSquares && !options.Amax) {
      break;  // early exit, as the spec asks
    }
  }
  return total;
}

}  // namespace

bool HasNonFinite(std::span<const TensorPtr> tensors) { return ReadPass(tensors, {}).FoundNonFinite; }

NonFiniteAndNorm CheckAndSumSquares(std::span<const TensorPtr> tensors, float factor) {
  const ReadPassResult result = ReadPass(tensors, {.Factor = factor, .SumOfSquares = true});
  return {result.FoundNonFinite, result.SumOfSquares};
}

NonFiniteAndAmax CheckAndAmax(std::span<const TensorPtr> tensors) {
  const ReadPassResult result = ReadPass(tensors, {.Amax = true});
  return {result.FoundNonFinite, result.Amax};
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
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    ScaleInPlace(*aliased, factor);
    return;
  }
  for (const BackendGroup& group : GroupByBackend(tensors)) {
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

// Multiplies @p values by @p factor (not at all for 1, which keeps NaN payloads as the fused
// kernels do); true when any result is Inf or NaN. Exponent bits, not std::isfinite, so the
// loop vectorises.
bool ScaleAndCheckFloats(std::span<float> values, float factor) {
  constexpr std::uint32_t kExponent = 0x7f800000U;
  std::uint32_t non_finite = 0;
  if (factor == 1.0f) {
    for (const float v : values) {
      non_finite |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & kExponent) == kExponent);
    }
    return non_finite != 0;
  }
  for (float& v : values) {
    v *= factor;
    non_finite |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & kExponent) == kExponent);
  }
  return non_finite != 0;
}

// The elements of a tensor the host addresses (its HostBytes() when they are the elements and
// aligned for the conversion kernels), else an empty span.
std::span<std::byte> HostElements(ITensor& tensor) {
  const DataType dtype = tensor.GetDataType();
  const std::span<std::byte> bytes = tensor.MutableHostBytes();
  if (!IsValid(dtype) || bytes.size() / ElementSize(dtype) != tensor.Size() || bytes.size() % ElementSize(dtype) != 0 ||
      reinterpret_cast<std::uintptr_t>(bytes.data()) % ElementSize(dtype) != 0) {
    return {};
  }
  return bytes;
}

// `dst = round(src * factor)` for a pair no backend fuses (a tensor without a backend and
// without host bytes on either side, or two backends). The source widens straight into the
// destination's memory when that is host FP32, else into one buffer that is then narrowed into
// the destination: never a vector by value. Returns the non-finite flag when @p check.
bool HostCast(const ITensor& src, ITensor& dst, float factor, bool check) {
  const std::size_t size = src.Size();
  const std::span<std::byte> dst_bytes = HostElements(dst);
  if (!dst_bytes.empty() && dst.GetDataType() == DataType::Float32 &&
      reinterpret_cast<std::uintptr_t>(dst_bytes.data()) % alignof(float) == 0) {
    const std::span<float> out(reinterpret_cast<float*>(dst_bytes.data()), size);
    src.CopyToFloats(out);
    if (!check && factor == 1.0f) {
      return false;
    }
    return ScaleAndCheckFloats(out, factor) && check;
  }
  std::vector<float> buffer(size);
  src.CopyToFloats(buffer);
  if (factor != 1.0f) {
    ScaleAndCheckFloats(buffer, factor);
  }
  if (!dst_bytes.empty()) {
    ConvertHostElements(buffer.data(), DataType::Float32, dst_bytes.data(), dst.GetDataType(), size);
  } else {
    dst.CopyFromFloats(buffer);
  }
  // Narrowing can overflow where the FP32 product did not, so the destination is what is checked.
  return check && dst.HasNonFinite();
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
  if (const std::optional<AliasedPairs> aliased = detail::WithHostAliases(src, dst)) {
    return CastInto(aliased->src, aliased->dst, factor);
  }
  // Pairs whose source and destination share a backend go to its fused kernel.
  bool found = false;
  ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const ITensor* const> s, std::span<ITensor* const> d) {
        found = backend.CastInto(s, d, factor) || found;
      },
      [&](std::size_t i) { found = HostCast(*src[i], *dst[i], factor, true) || found; });
  return found;
}

void CopyInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  RequirePairs(src, dst);
  if (const std::optional<AliasedPairs> aliased = detail::WithHostAliases(src, dst)) {
    CopyInto(aliased->src, aliased->dst, factor);
    return;
  }
  ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const ITensor* const> s, std::span<ITensor* const> d) {
        backend.CopyInto(s, d, factor);
      },
      [&](std::size_t i) { HostCast(*src[i], *dst[i], factor, false); });
}

void AddInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float alpha) {
  RequirePairs(src, dst);
  if (const std::optional<AliasedPairs> aliased = detail::WithHostAliases(src, dst)) {
    AddInto(aliased->src, aliased->dst, alpha);
    return;
  }
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
