#include <mlframework/amp/ILossScaler.hpp>

namespace mlframework::amp {

ILossScaler::~ILossScaler() = default;

UnscaledGradients ILossScaler::UnscaleGradientsAndCheck(const GradientMap& gradients) {
  // Check first: a user's UnscaleGradients may work in place, and the spec checks the scaled values.
  const bool overflow = CheckOverflow(gradients);
  return UnscaledGradients{UnscaleGradients(gradients), overflow};
}

}  // namespace mlframework::amp
