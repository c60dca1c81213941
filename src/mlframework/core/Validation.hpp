#pragma once
// Private: the checks of numeric arguments every area makes, so their messages read alike
// ("must be finite and > 0, got 0.5").

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

/// @p value as the messages print numbers (std::ostream's default: 6 significant digits, inf, nan).
std::string Show(double value);
/// ArgumentError naming @p parameter unless @p value is finite and > 0.
void RequirePositive(double value, const char* parameter);
/// ArgumentError naming @p parameter unless @p value is finite and >= 0.
void RequireNonNegative(double value, const char* parameter);

/// ArgumentError naming `step` and its value unless @p step >= 0 (a front end's step index).
void RequireStepIndex(std::int64_t step);

/// InvalidOperationError("<@p owner> was moved from; use the object it was moved into").
[[noreturn]] void ThrowMovedFrom(std::string_view owner);
/// *@p state, the state a movable object owns through a (unique or shared) pointer that a move
/// leaves null: every member reaches the state through this, so a moved-from @p owner throws
/// ThrowMovedFrom's InvalidOperationError instead of dereferencing null.
template <typename Pointer>
auto& Live(const Pointer& state, std::string_view owner) {
  if (!state) {
    ThrowMovedFrom(owner);
  }
  return *state;
}

/// ArgumentError naming @p parameter and the dtype when @p tensor is FP8: loss scaling refuses FP8
/// gradients in every front end (one loss scale cannot fit FP8's few exponents to every tensor).
void RequireLossScalable(const ITensor& tensor, std::string_view parameter);
/// The same for one gradient of the single-tensor entry points: ArgumentNullError naming
/// @p parameter when @p tensor is null, then the check above.
void RequireLossScalable(const TensorPtr& tensor, std::string_view parameter);
/// The same for the gradient named @p name of a gradient map (`gradients["name"]`). The
/// parameter's name is built only for the error: a step checks thousands of gradients.
void RequireLossScalableGradient(const ITensor& tensor, const std::string& name);
/// The tensors of @p gradients in name order for loss scaling: ArgumentNullError naming a null
/// entry (TensorList), then ArgumentError naming the first FP8 entry (RequireLossScalable).
std::vector<TensorPtr> LossScalingList(const GradientMap& gradients);
/// The same for a list: ArgumentNullError naming `name[i]` for a null entry, ArgumentError naming
/// `name[i]` and the dtype for an FP8 one.
void RequireLossScalable(std::span<const TensorPtr> tensors, const char* name);

}  // namespace mlframework::detail
