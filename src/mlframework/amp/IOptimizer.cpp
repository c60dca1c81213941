#include <mlframework/amp/IOptimizer.hpp>

#include <mlframework/amp/IOptimizerState.hpp>

namespace mlframework::amp {

// Out of line so the vtable and type info live in the library (one definition across the boundary).
IOptimizer::~IOptimizer() = default;

IOptimizerState* IOptimizer::State() noexcept { return nullptr; }

IOptimizerState::~IOptimizerState() = default;

}  // namespace mlframework::amp
