#include <mlframework/amp/GradScalerContext.hpp>

#include <mlframework/core/Error.hpp>

namespace mlframework::amp {

GradScalerContext::GradScalerContext(GradScaler& scaler, const TensorPtr& loss) : scaler_(&scaler) {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  scaled_loss_ = scaler.Scale(loss);
}

GradScalerContext::~GradScalerContext() { Dispose(); }

const TensorPtr& GradScalerContext::ScaledLoss() const noexcept { return scaled_loss_; }

bool GradScalerContext::Step(IOptimizer& optimizer) { return Step(optimizer, true); }

bool GradScalerContext::Step(IOptimizer& optimizer, bool updateScale) {
  if (disposed_) {
    throw InvalidOperationError("GradScalerContext::Step() after Dispose(): open a new context for this iteration.");
  }
  if (stepped_) {
    throw InvalidOperationError(
        "GradScalerContext::Step() called twice: a context is one iteration; open a new context for the next one.");
  }
  const bool stepped = scaler_->StepImpl(optimizer, true, updateScale);
  stepped_ = true;
  return stepped;
}

void GradScalerContext::Dispose() noexcept {
  if (disposed_) {
    return;
  }
  disposed_ = true;
  if (!stepped_) {
    // No step: an exception in backward or an early exit. Drop the iteration (no scale update),
    // so the next one starts clean.
    scaler_->AbandonIteration();
  }
}

}  // namespace mlframework::amp
