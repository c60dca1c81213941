#pragma once
// Private: how core's list operations (MultiTensor.cpp) check their
// arguments and split a list among the backends of its tensors. A list almost always comes
// from one backend; these walks serve the rest: tensors of several backends, and tensors
// without one, which take the per-tensor host path.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Device.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ReadPass.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/core/HostAlias.hpp"

namespace mlframework::detail {

/// ArgumentNullError naming `name[i]` for the first null entry.
inline void RequireNonNull(std::span<const TensorPtr> tensors, const char* name) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) {
      throw ArgumentNullError(std::string(name) + "[" + std::to_string(i) + "]");
    }
  }
}

/// Non-null entries, lists of one length and pairs of one shape, else ArgumentError naming the
/// first offending entry of @p dst.
inline void RequirePairs(std::span<const TensorPtr> src, std::span<const TensorPtr> dst) {
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

/// The backend a whole list is offered to first: its first tensor's (null for an empty list or a
/// null first entry).
inline const TensorBackend* FirstBackend(std::span<const TensorPtr> tensors) {
  return tensors.empty() || !tensors.front() ? nullptr : tensors.front()->Backend();
}

/// The read pass through each tensor's host floats (ITensor::CopyToFloats()): for tensors no
/// fused kernel reads. Entries must be non-null.
ReadPassResult ReadEachTensor(std::span<const TensorPtr> tensors, const ReadPassOptions& options);

/// Tensors that one backend runs on one device, in list order. A null backend: tensors the library
/// cannot see, read and written through their floats (on any device).
struct BackendGroup {
  const TensorBackend* backend = nullptr;
  Device device;
  std::vector<std::size_t> indices;
};

/// The one grouping of a list (PyTorch's GradScaler groups per device, and each kernel takes any
/// dtype): @p tensors (non-null) by backend and device, groups in the order of their first entry;
/// almost always one group. Core's passes (MultiTensor.cpp) group a list after replacing host
/// tensors without a backend by CPU aliases, so those join the CPU group; a scaler's state goes
/// where the list's group is (ScaleStateOwner::Place()).
inline std::vector<BackendGroup> GroupByBackend(std::span<const TensorPtr> tensors) {
  std::vector<BackendGroup> groups;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorBackend* backend = tensors[i]->Backend();
    const Device device = backend != nullptr ? tensors[i]->GetDevice() : Device::CPU();
    BackendGroup* group = nullptr;
    for (BackendGroup& g : groups) {
      if (g.backend == backend && g.device == device) {
        group = &g;
      }
    }
    if (group == nullptr) {
      group = &groups.emplace_back(BackendGroup{backend, device, {}});
      group->indices.reserve(tensors.size() - i);
    }
    group->indices.push_back(i);
  }
  return groups;
}

/// The raw pointers of every entry of @p tensors.
template <typename Pointer>
std::vector<Pointer> Pointers(std::span<const TensorPtr> tensors) {
  std::vector<Pointer> pointers;
  pointers.reserve(tensors.size());
  for (const TensorPtr& tensor : tensors) {
    pointers.push_back(tensor.get());
  }
  return pointers;
}

/// Runs @p fused(backend, src, dst) on runs of pairs whose source and destination share a
/// backend, in order, and @p host(i) on every other pair. Lists whose pairs all share one backend
/// (the usual case) are handed over as the caller's own spans, so a backend recognises lists it
/// kept.
template <typename Fused, typename Host>
void ForEachPairRun(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, Fused&& fused, Host&& host) {
  const TensorBackend* backend = src.empty() ? nullptr : src.front()->Backend();
  bool one_run = backend != nullptr;
  for (std::size_t i = 0; one_run && i < src.size(); ++i) {
    one_run = src[i]->Backend() == backend && dst[i]->Backend() == backend;
  }
  if (one_run) {
    fused(*backend, src, dst);
    return;
  }
  std::vector<TensorPtr> run_src;
  std::vector<TensorPtr> run_dst;
  backend = nullptr;
  auto flush = [&] {
    if (!run_src.empty()) {
      fused(*backend, std::span<const TensorPtr>(run_src), std::span<const TensorPtr>(run_dst));
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
      run_src.push_back(src[i]);
      run_dst.push_back(dst[i]);
      continue;
    }
    host(i);
  }
  flush();
}

/// Pairs after host-addressable tensors without a backend have been replaced by CPU aliases.
struct AliasedPairs {
  std::vector<TensorPtr> src;
  std::vector<TensorPtr> dst;
};

/// WithHostAliases() on both lists, or nullopt when neither list changes.
inline std::optional<AliasedPairs> WithHostAliases(std::span<const TensorPtr> src, std::span<const TensorPtr> dst) {
  std::optional<std::vector<TensorPtr>> aliased_src = WithHostAliases(src);
  std::optional<std::vector<TensorPtr>> aliased_dst = WithHostAliases(dst);
  if (!aliased_src && !aliased_dst) {
    return std::nullopt;
  }
  AliasedPairs pairs;
  pairs.src = aliased_src ? std::move(*aliased_src) : std::vector<TensorPtr>(src.begin(), src.end());
  pairs.dst = aliased_dst ? std::move(*aliased_dst) : std::vector<TensorPtr>(dst.begin(), dst.end());
  return pairs;
}

}  // namespace mlframework::detail
