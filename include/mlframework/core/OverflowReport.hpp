#pragma once
/// @file OverflowReport.hpp
/// @brief Which gradients overflowed on a step, how, and on which ranks.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// One gradient that held non-finite values on an overflow step.
struct MLFRAMEWORK_EXPORT TensorOverflow {
  std::string Name = {};             ///< The GradientMap key ("#<index>" for an unnamed list).
  std::uint64_t NonFiniteCount = 0;  ///< Inf and NaN elements (summed over the ranks in FSDP).
  std::uint64_t FirstIndex = 0;      ///< Flat index of the first of them (the smallest over the ranks).
  bool HasNaN = false;               ///< Some element was NaN.
  bool HasPosInf = false;            ///< Some element was +Inf.
  bool HasNegInf = false;            ///< Some element was -Inf.
  std::uint64_t NaNCount = 0;        ///< NaN elements (summed over the ranks in FSDP).
  std::uint64_t PosInfCount = 0;     ///< +Inf elements (summed over the ranks in FSDP).
  std::uint64_t NegInfCount = 0;     ///< -Inf elements (summed over the ranks in FSDP).

  /// "layer3.weight (12 Inf, first at 4)", "fc.bias (1 NaN, 2 +Inf, first at 17)": a single kind
  /// with the total; mixed kinds each with its count (the kinds alone, "3 NaN, +Inf", when the
  /// per-kind counts do not add up to NonFiniteCount, as in a hand-built entry).
  std::string ToString() const;
};

/// The report of one overflow step, built by the front ends (GradScaler, GradientConversionLayer,
/// FSDPMixedPrecisionManager) only on steps that overflowed: one extra read of the checked
/// gradients then (TensorBackend::ScanNonFinite), nothing on clean steps. For device gradients
/// that read waits for the device, so there they build it only while an observer is registered.
struct MLFRAMEWORK_EXPORT OverflowReport {
  std::int64_t Step = 0;        ///< The front end's step index (0 for its first step).
  float LossScale = 0.0f;       ///< The scale the gradients were produced with.
  std::vector<int> Ranks = {};  ///< Ranks whose gradients overflowed (a single process: {0}).
  /// The gradients that held non-finite values: in the order the front end was given
  /// (SetGradientOrder() of GradScaler, GradientConversionLayer, FSDPMixedPrecisionManager),
  /// names it was not given after them in map order.
  std::vector<TensorOverflow> Tensors = {};

  /// "step 12, scale 65536, rank 0: layer3.weight (12 Inf, first at 4)": one line ("step 12,
  /// scale 0.5: no non-finite gradient values found" when Tensors and Ranks are empty).
  std::string ToString() const;
  /// Orders Tensors as @p names lists them (the framework's registration or backward order);
  /// names not in @p names keep their order after those that are. Stable, in place.
  void OrderBy(std::span<const std::string> names);

  /// The report of @p gradients on this process (rank @p rank): one ScanNonFinite() pass.
  /// ArgumentNullError naming a null entry.
  static OverflowReport FromGradients(const GradientMap& gradients, std::int64_t step, float loss_scale, int rank = 0);
  /// The report of an unnamed list: FromGradients() with the names "#0", "#1", ... (list order).
  static OverflowReport FromTensors(std::span<const TensorPtr> tensors, std::int64_t step, float loss_scale,
                                    int rank = 0);
};

/// The non-finite values of each tensor of @p tensors (TensorBackend::ScanNonFinite of each
/// tensor's backend, the host default for tensors without one). ArgumentNullError naming a null
/// entry (`tensors[i]`).
MLFRAMEWORK_EXPORT std::vector<NonFiniteScan> ScanNonFinite(std::span<const TensorPtr> tensors);

}  // namespace mlframework
