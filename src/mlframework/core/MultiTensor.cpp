#include <mlframework/core/MultiTensor.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/HostAlias.hpp"
#include "mlframework/core/HostWrite.hpp"
#include "mlframework/core/ListPasses.hpp"
#include "mlframework/core/TensorGroups.hpp"

namespace mlframework {

namespace {

using detail::BackendGroup;
using detail::FirstBackend;
using detail::GroupByBackend;
using detail::RequireNonNull;
using detail::RequirePairs;

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

}  // namespace

// The one route of every read pass: the whole list to the backend of its first tensor, which
// runs it when it knows the list (the CPU backend's kept plans); else the list grouped by backend
// once, each group to its backend, and the tensors without one through their ITensor members.
ReadPassResult detail::ReadPass(std::span<const TensorPtr> tensors, const ReadPassOptions& options) {
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<ReadPassResult> result = first->Read({tensors, false}, options)) {
      return *result;
    }
  }
  RequireNonNull(tensors, "tensors");
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    return detail::ReadPass(*aliased, options);
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

bool HasNonFinite(std::span<const TensorPtr> tensors) { return detail::ReadPass(tensors, {}).FoundNonFinite; }

NonFiniteAndNorm CheckAndSumSquares(std::span<const TensorPtr> tensors, float factor) {
  const ReadPassResult result = detail::ReadPass(tensors, {.Factor = factor, .SumOfSquares = true});
  return {result.FoundNonFinite, result.SumOfSquares};
}

NonFiniteAndAmax CheckAndAmax(std::span<const TensorPtr> tensors) {
  const ReadPassResult result = detail::ReadPass(tensors, {.Amax = true});
  return {result.FoundNonFinite, result.Amax};
}

double SumOfSquares(std::span<const TensorPtr> tensors, float factor) {
  return CheckAndSumSquares(tensors, factor).SumOfSquares;
}

namespace {

// One tensor without a backend, in place, through its own ITensor members (ITensor.hpp's table):
// UnscaleAndCheck() or MultiplyInPlace(); the amax form through its floats.
WritePassResult ScaleOwnTensor(ITensor& tensor, const WritePassOptions& options) {
  if (options.Amax) {
    return detail::WritePairThroughFloats(tensor, tensor, options);
  }
  if (options.Check) {
    return {.FoundNonFinite = tensor.UnscaleAndCheck(options.Factor)};
  }
  tensor.MultiplyInPlace(options.Factor);
  return {};
}

// A backend's answer for its own share of a list (Grouped), which it may not decline.
WritePassResult WriteGroup(const TensorBackend& backend, std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                           const WritePassOptions& options) {
  if (const std::optional<WritePassResult> result = backend.Write({src, true}, {dst, true}, options)) {
    return *result;
  }
  throw InvalidOperationError("the " + std::string(backend.Name()) +
                              " backend declined a write pass over its own tensors");
}

}  // namespace

// The one route of every write pass, like the read pass's: the whole lists to the backend of
// the first source tensor, which runs them when it knows them; else the arguments checked, host
// aliases for tensors without a backend that the host addresses, and each backend's share
// (pairs: runs of pairs whose two tensors share a backend) to that backend, the rest through
// each tensor's own members or host floats.
WritePassResult detail::WritePass(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                  const WritePassOptions& options) {
  ValidateWritePassOptions(options);
  const bool in_place = options.Op == WriteOp::Scale;
  if (const TensorBackend* first = FirstBackend(src)) {
    if (const std::optional<WritePassResult> result = first->Write({src, false}, {dst, false}, options)) {
      return *result;
    }
  }
  WritePassResult total;
  if (in_place) {
    RequireNonNull(src, "tensors");
    if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(src)) {
      return WritePass(*aliased, {}, options);
    }
    const std::vector<BackendGroup> groups = GroupByBackend(src);
    for (const BackendGroup& group : groups) {
      std::vector<TensorPtr> members;
      std::span<const TensorPtr> list = src;
      if (groups.size() > 1) {
        members = Members(src, group.indices);
        list = members;
      }
      if (group.backend != nullptr) {
        detail::Fold(total, WriteGroup(*group.backend, list, {}, options));
        continue;
      }
      for (const TensorPtr& tensor : list) {
        detail::Fold(total, ScaleOwnTensor(*tensor, options));
      }
    }
    return total;
  }
  RequirePairs(src, dst);
  if (const std::optional<detail::AliasedPairs> aliased = detail::WithHostAliases(src, dst)) {
    return WritePass(aliased->src, aliased->dst, options);
  }
  // Pairs whose source and destination share a backend go to its fused kernel.
  detail::ForEachPairRun(
      src, dst,
      [&](const TensorBackend& backend, std::span<const TensorPtr> s, std::span<const TensorPtr> d) {
        detail::Fold(total, WriteGroup(backend, s, d, options));
      },
      [&](std::size_t i) { detail::Fold(total, detail::WritePairThroughFloats(*src[i], *dst[i], options)); });
  return total;
}

bool UnscaleAndCheck(std::span<const TensorPtr> tensors, float factor) {
  return detail::WritePass(tensors, {}, {.Op = WriteOp::Scale, .Factor = factor, .Check = true}).FoundNonFinite;
}

void ScaleInPlace(std::span<const TensorPtr> tensors, float factor) {
  detail::WritePass(tensors, {}, {.Op = WriteOp::Scale, .Factor = factor});
}

NonFiniteAndAmax UnscaleCheckAndAmax(std::span<const TensorPtr> tensors, float factor) {
  const WritePassResult result =
      detail::WritePass(tensors, {}, {.Op = WriteOp::Scale, .Factor = factor, .Check = true, .Amax = true});
  return {result.FoundNonFinite, result.Amax};
}

bool CastInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  return detail::WritePass(src, dst, {.Op = WriteOp::Cast, .Factor = factor, .Check = true}).FoundNonFinite;
}

NonFiniteAndAmax CastIntoAndAmax(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  const WritePassResult result =
      detail::WritePass(src, dst, {.Op = WriteOp::Cast, .Factor = factor, .Check = true, .Amax = true});
  return {result.FoundNonFinite, result.Amax};
}

void CopyInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  detail::WritePass(src, dst, {.Op = WriteOp::Cast, .Factor = factor});
}

void AddInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float alpha) {
  detail::WritePass(src, dst, {.Op = WriteOp::Add, .Factor = alpha});
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
