#include <mlframework/amp/GradScalerContext.hpp>

#include <algorithm>

#include <mlframework/core/Error.hpp>

namespace mlframework::amp {

GradScalerContext::GradScalerContext(GradScaler& scaler, const TensorPtr& loss) : scaler_(&scaler) {
  static_cast<void>(scaler.State());  // InvalidOperationError for a moved-from scaler
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  scaled_loss_ = scaler.Scale(loss);
}

GradScalerContext::~GradScalerContext() { Dispose(); }

const TensorPtr& GradScalerContext::ScaledLoss() const noexcept { return scaled_loss_; }

bool GradScalerContext::Step(IOptimizer& optimizer, StepMode mode) {
  if (disposed_) {
    throw InvalidOperationError("GradScalerContext::Step() after Dispose(): open a new context for this iteration.");
  }
  if (std::find(stepped_.begin(), stepped_.end(), &optimizer) != stepped_.end()) {
    throw InvalidOperationError(
        "GradScalerContext::Step() called twice for the same optimizer: a context is one iteration and steps "
        "each optimizer once; open a new context for the next iteration.");
  }
  stepped_.reserve(stepped_.size() + 1);  // the pushes below cannot throw after the step
  bool committed = false;
  try {
    const bool stepped = scaler_->StepImpl(optimizer, mode, &committed);
    stepped_.push_back(&optimizer);
    return stepped;
  } catch (...) {
    // An observer's exception comes after the scaler stepped the optimizer and finished the
    // iteration: that is a step, which Dispose() must not abandon.
    if (committed) {
      stepped_.push_back(&optimizer);
    }
    throw;
  }
}

void GradScalerContext::Dispose() noexcept {
  if (disposed_) {
    return;
  }
  disposed_ = true;
  if (stepped_.empty()) {
    // No step: an exception in backward or an early exit. Drop the iteration (no scale update),
    // so the next one starts clean.
    scaler_->AbandonIteration();
  }
}

}  // namespace mlframework::amp
