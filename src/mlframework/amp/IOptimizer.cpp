#include <mlframework/amp/IOptimizer.hpp>

namespace mlframework::amp {

// Out of line so the vtable and type info live in the library (one definition across the boundary).
IOptimizer::~IOptimizer() = default;

}  // namespace mlframework::amp
