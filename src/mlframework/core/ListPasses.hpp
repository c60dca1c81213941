#pragma once
// Private: core's two routes from a list operation to the backends (MultiTensor.cpp). Every list
// function of MultiTensor.hpp is one of them with its options; HostScaling's generic backend runs
// them for host tensors of any backend.

#include <span>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ReadPass.hpp>
#include <mlframework/core/WritePass.hpp>

namespace mlframework::detail {

/// The read pass over @p tensors: the whole list to its first tensor's backend, else the list
/// checked and grouped by backend, each group to its backend (TensorBackend::Read), the tensors
/// without one through their ITensor members.
ReadPassResult ReadPass(std::span<const TensorPtr> tensors, const ReadPassOptions& options);

/// The write pass of @p options: in place over @p src (WriteOp::Scale, @p dst empty) or pairwise
/// from @p src into @p dst. The same route as ReadPass(), pairs checked (RequirePairs) before
/// they are grouped (TensorBackend::Write).
WritePassResult WritePass(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                          const WritePassOptions& options);

}  // namespace mlframework::detail
