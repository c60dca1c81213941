#pragma once
/// @file Float8Amax.hpp
/// @brief Amax agreement across ranks for FP8 scaling recipes (Transformer Engine's amax
/// reduction over the data-parallel group).

#include <span>
#include <string>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>

namespace mlframework::distributed {

/// Replaces the amax each rank recorded for @p names in @p recipe (IScalingRecipe::Amax(), the
/// writable one-element view) with its maximum over the ranks of @p group (collective), so the
/// next IScalingRecipe::UpdateScales() computes the same scales on every rank, as Transformer
/// Engine reduces the amax over the data-parallel group before its scale update.
///
/// Call it after the step's Quantize() calls and before UpdateScales(). The amax views are
/// packed into one flat FP32 tensor on their device (one fused multi-tensor copy), reduced in
/// ONE AllReduce(ReduceOp::Max) and copied back (a second fused copy): on a CUDA device under
/// the NCCL engine nothing is read back to the host. An infinite amax wins the maximum, so every
/// rank's DelayedScaling sees it and keeps its scale alike; a NaN amax fares as the engine's MAX
/// treats NaN (MPI_MAX and ncclMax compare, so another rank's finite amax may win over it), as
/// under Transformer Engine's all-reduce. Under CurrentScaling the agreement only replaces the
/// recorded amax: its casts already took their scales from each rank's own amax and its
/// UpdateScales() changes nothing, so the ranks' scales stay their own (Transformer Engine's
/// current scaling reduces the amax inside the cast, which this call does not do).
///
/// Every rank must pass the same names in the same order. The checks run on every rank before
/// any communication and the verdict is agreed over @p group (one host all-reduce), so a bad
/// call throws on every rank with nothing changed:
/// - ArgumentError naming `names` for an unknown or repeated name (the value in the message);
/// - ArgumentError naming `recipe` when the recipe has no per-tensor amax for a name (Amax()
///   throws, returns null, or returns anything but a one-element FP32 tensor; block-scaled
///   MXFP8 has no per-tensor amax and is not an IScalingRecipe for that reason);
/// - ArgumentError naming `names` when the amaxes lie on more than one device (one collective
///   moves one buffer; agree each device's names with its own call).
/// An empty list does nothing (no communication).
MLFRAMEWORK_EXPORT void AllReduceAmax(IProcessGroup& group, fp8::IScalingRecipe& recipe,
                                      std::span<const std::string> names);

/// AllReduceAmax() over every name registered in @p recipe (IScalingRecipe::Names()).
MLFRAMEWORK_EXPORT void AllReduceAmax(IProcessGroup& group, fp8::IScalingRecipe& recipe);

}  // namespace mlframework::distributed
