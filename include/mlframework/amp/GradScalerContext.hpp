#pragma once
/// @file GradScalerContext.hpp
/// @brief RAII scope of one training iteration with a GradScaler.

#include <vector>

#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/amp/StepMode.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

/// One training iteration: scales the loss on construction, steps through the scaler, and
/// on destruction without a step (an exception in backward, an early `continue`) abandons
/// the iteration, so the scaler stays consistent: no half-applied update, no double update later.
///
/// @code
/// {
///   amp::GradScalerContext ctx(scaler, loss);
///   model.Backward(ctx.ScaledLoss());
///   if (!ctx.Step(optimizer)) { /* overflow: skipped */ }
///   ctx.Step(embeddingOptimizer);  // a second optimizer of the same iteration
/// }
/// @endcode
///
/// An abandoned iteration drops whatever it recorded, overflow included. If you check for
/// overflow yourself inside a context and leave early, call GradScaler::Update() before
/// leaving so a dynamic scale still backs off (or let Step() skip the step, which does it).
///
/// The scaler must outlive the context and stay where it is: a context whose GradScaler was
/// moved from throws InvalidOperationError from Step() (Dispose() then does nothing). Not
/// copyable or movable (it is a scope).
class MLFRAMEWORK_EXPORT GradScalerContext {
 public:
  /// Scales @p loss with @p scaler (GradScaler::Scale). ArgumentNullError("loss") when null.
  GradScalerContext(GradScaler& scaler, const TensorPtr& loss);
  /// Abandons the iteration when it was not stepped (see Dispose()).
  ~GradScalerContext();
  /// A scope cannot be copied.
  GradScalerContext(const GradScalerContext&) = delete;
  /// A scope cannot be assigned.
  GradScalerContext& operator=(const GradScalerContext&) = delete;

  /// The loss to run backward on.
  const TensorPtr& ScaledLoss() const noexcept;
  /// GradScaler::Step(optimizer, mode) for this iteration: by default unscales, steps the
  /// optimizer unless its gradients overflowed and updates the scale; StepMode::DeferUpdate and
  /// StepMode::DeferStepAndUpdate mean what they mean there (the iteration stays open until
  /// GradScaler::Update()). Returns false when the step was skipped. Several optimizers: call it
  /// once for each; each is skipped only when its own gradients overflowed and the scale is
  /// updated once, from all of them (GradScaler's class notes). InvalidOperationError when this
  /// context already stepped @p optimizer or was disposed, or when the GradScaler was moved from.
  /// An observer's exception reaches the caller after the step (GradScaler's class notes): the
  /// optimizer stepped, and the context counts it as stepped.
  bool Step(IOptimizer& optimizer, StepMode mode = StepMode::StepAndUpdate);
  /// Ends the scope early (spec 004's IDisposable): abandons the iteration when it was not
  /// stepped. Idempotent; the destructor then does nothing.
  void Dispose() noexcept;

 private:
  GradScaler* scaler_;
  TensorPtr scaled_loss_;
  std::vector<const IOptimizer*> stepped_;  // the optimizers this context stepped
  bool disposed_ = false;
};

}  // namespace mlframework::amp
