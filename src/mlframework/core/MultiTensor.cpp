#include <mlframework/core/MultiTensor.hpp>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/HostAlias.hpp"
#include "mlframework/core/HostWrite.hpp"
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

// The one backend of every tensor of @p lists, for a pass with a scale state in device memory:
// that state belongs to one backend, so the lists cannot be split among several. ArgumentError
// naming the first tensor of another backend, or of none.
const TensorBackend& OneBackend(std::initializer_list<std::pair<std::span<const TensorPtr>, const char*>> lists) {
  const TensorBackend* backend = nullptr;
  for (const auto& [tensors, name] : lists) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const TensorBackend* own = tensors[i]->Backend();
      backend = backend == nullptr ? own : backend;
      if (own == nullptr || own != backend) {
        throw ArgumentError(std::string(name) + "[" + std::to_string(i) + "]",
                            "is a tensor on " + tensors[i]->GetDevice().ToString() + " of backend " +
                                (own == nullptr ? std::string("none") : std::string(own->Name())) +
                                ", but a pass with a scale state in device memory takes the tensors of the "
                                "state's backend only");
      }
    }
  }
  return *backend;
}

// Calls visit(backend, share) for each backend's share of @p tensors (the whole list when it
// holds one backend; null for the tensors without one), in order, until visit returns false.
template <typename Visit>
void ForEachBackendGroup(std::span<const TensorPtr> tensors, Visit&& visit) {
  const std::vector<BackendGroup> groups = GroupByBackend(tensors);
  if (groups.size() == 1) {
    visit(groups[0].backend, tensors);
    return;
  }
  for (const BackendGroup& group : groups) {
    std::vector<TensorPtr> members;
    members.reserve(group.indices.size());
    for (const std::size_t i : group.indices) {
      members.push_back(tensors[i]);
    }
    if (!visit(group.backend, std::span<const TensorPtr>(members))) {
      return;
    }
  }
}

// A backend may decline lists it was offered whole, not its own share once grouped.
[[noreturn]] void Declined(const TensorBackend& backend, const char* pass) {
  throw InvalidOperationError("the " + std::string(backend.Name()) + " backend declined " + pass +
                              " over its own tensors");
}

// A backend's answer for its own share of a list (Grouped), which it may not decline.
WritePassResult WriteGroup(const TensorBackend& backend, std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                           const WritePassOptions& options) {
  if (const std::optional<WritePassResult> result = backend.Write({src, true}, {dst, true}, options)) {
    return *result;
  }
  Declined(backend, "a write pass");
}

}  // namespace

namespace {

// A pass with a state in device memory goes whole to the lists' one backend, which takes the
// state's factor and records on the device; an empty list records nothing.
ReadPassResult ReadWithState(std::span<const TensorPtr> tensors, const ReadPassOptions& options) {
  if (auto* host = dynamic_cast<HostScaleState*>(options.State)) {
    host->Record(ReadPass(tensors, {}).FoundNonFinite);
    return {};
  }
  RequireNonNull(tensors, "tensors");
  if (tensors.empty()) {
    return {};
  }
  const TensorBackend& backend = OneBackend({{tensors, "tensors"}});
  if (!backend.Read({tensors, true}, options)) {
    Declined(backend, "a read pass with a scale state");
  }
  return {};
}

// A HostScaleState's pass is the plain pass with the state's factor, its answer recorded.
WritePassResult WriteWithState(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                               const WritePassOptions& options) {
  const bool unscale = options.FactorOfState == StateFactor::InverseScale;
  if (auto* host = dynamic_cast<HostScaleState*>(options.State)) {
    const float scale = host->CurrentScale();
    const bool amax = unscale && host->AmaxTracking();
    const WritePassResult result = WritePass(
        src, dst, {.Op = options.Op, .Factor = unscale ? InverseScale(scale) : scale, .Check = unscale, .Amax = amax});
    if (unscale) {
      host->Record(result.FoundNonFinite);
    }
    if (amax) {
      host->RecordAmax(result.Amax);
    }
    return {};
  }
  if (options.Op == WriteOp::Scale) {
    RequireNonNull(src, "tensors");
  } else {
    RequirePairs(src, dst);
  }
  if (src.empty()) {
    return {};
  }
  const TensorBackend& backend =
      options.Op == WriteOp::Scale ? OneBackend({{src, "tensors"}}) : OneBackend({{src, "src"}, {dst, "dst"}});
  return WriteGroup(backend, src, dst, options);  // the answer is in the state
}

}  // namespace

// The one route of every read pass: the whole list to the backend of its first tensor, which
// runs it when it knows the list (the CPU backend's kept plans); else the list grouped by backend
// once, each group to its backend, and the tensors without one through their host floats.
ReadPassResult ReadPass(std::span<const TensorPtr> tensors, const ReadPassOptions& options) {
  ValidateReadPassOptions(options);
  if (options.State != nullptr) {
    return ReadWithState(tensors, options);
  }
  if (const TensorBackend* first = FirstBackend(tensors)) {
    if (const std::optional<ReadPassResult> result = first->Read({tensors, false}, options)) {
      return *result;
    }
  }
  RequireNonNull(tensors, "tensors");
  if (const std::optional<std::vector<TensorPtr>> aliased = detail::WithHostAliases(tensors)) {
    return ReadPass(*aliased, options);
  }
  ReadPassResult total;
  ForEachBackendGroup(tensors, [&](const TensorBackend* backend, std::span<const TensorPtr> list) {
    ReadPassResult part;
    if (backend == nullptr) {
      part = detail::ReadEachTensor(list, options);
    } else if (const std::optional<ReadPassResult> result = backend->Read({list, true}, options)) {
      part = *result;
    } else {
      Declined(*backend, "a read pass");
    }
    total.FoundNonFinite = total.FoundNonFinite || part.FoundNonFinite;
    total.SumOfSquares += part.SumOfSquares;
    total.Amax = std::max(total.Amax, part.Amax);
    return !total.FoundNonFinite || options.SumOfSquares || options.Amax;  // early exit, as the spec asks
  });
  return total;
}

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

// The one route of every write pass, like the read pass's: the whole lists to the backend of
// the first source tensor, which runs them when it knows them; else the arguments checked, host
// aliases for tensors without a backend that the host addresses, and each backend's share
// (pairs: runs of pairs whose two tensors share a backend) to that backend, the rest through
// each tensor's host floats.
WritePassResult WritePass(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                          const WritePassOptions& options) {
  ValidateWritePassOptions(options);
  if (options.State != nullptr) {
    return WriteWithState(src, dst, options);
  }
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
    ForEachBackendGroup(src, [&](const TensorBackend* backend, std::span<const TensorPtr> list) {
      if (backend != nullptr) {
        detail::Fold(total, WriteGroup(*backend, list, {}, options));
        return true;
      }
      for (const TensorPtr& tensor : list) {
        detail::Fold(total, detail::WritePairThroughFloats(*tensor, *tensor, options));
      }
      return true;
    });
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
  return WritePass(tensors, {}, {.Op = WriteOp::Scale, .Factor = factor, .Check = true}).FoundNonFinite;
}

void ScaleInPlace(std::span<const TensorPtr> tensors, float factor) {
  WritePass(tensors, {}, {.Op = WriteOp::Scale, .Factor = factor});
}

NonFiniteAndAmax UnscaleCheckAndAmax(std::span<const TensorPtr> tensors, float factor) {
  const WritePassResult result =
      WritePass(tensors, {}, {.Op = WriteOp::Scale, .Factor = factor, .Check = true, .Amax = true});
  return {result.FoundNonFinite, result.Amax};
}

bool CastInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  return WritePass(src, dst, {.Op = WriteOp::Cast, .Factor = factor, .Check = true}).FoundNonFinite;
}

NonFiniteAndAmax CastIntoAndAmax(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  const WritePassResult result =
      WritePass(src, dst, {.Op = WriteOp::Cast, .Factor = factor, .Check = true, .Amax = true});
  return {result.FoundNonFinite, result.Amax};
}

void CopyInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  WritePass(src, dst, {.Op = WriteOp::Cast, .Factor = factor});
}

void AddInto(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float alpha) {
  WritePass(src, dst, {.Op = WriteOp::Add, .Factor = alpha});
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
