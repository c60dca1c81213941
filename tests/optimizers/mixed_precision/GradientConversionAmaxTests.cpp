// GradientConversionLayer's amax tracking: the amax of the unscaled gradients of each checked
// step (16-bit ones from the fused unscale, FP32 ones from their check), the finite values only
// on a skipped step, with clipping from the pass that writes the clipped gradients, and the same
// results as without tracking.
#include <cmath>
#include <limits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "NonFinite.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using mlfw_test::kInf;

namespace {

GradientMap Gradients(float scale, float fp32_peak, float poison = 0.0f) {
  return {{"half", FromVector({3.0f * scale, poison == 0.0f ? -0.5f * scale : poison}, {2}, DataType::Float16)},
          {"full", FromVector({fp32_peak * scale, 0.25f * scale, -1.0f * scale}, {3}, DataType::Float32)}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradientConversionAmax)

BOOST_AUTO_TEST_CASE(TracksTheCheckedSteps) {
  const MixedPrecisionOptions options{.InitialLossScale = 1024.0f};
  GradientConversionLayer plain(options);
  GradientConversionLayer layer(options);
  BOOST_TEST(!layer.AmaxTracking());
  layer.SetAmaxTracking(true);
  BOOST_TEST(layer.AmaxTracking());
  BOOST_TEST(!layer.LastAmax().has_value());

  // The FP32 peak wins, then the FP16 one.
  for (const float fp32_peak : {7.0f, 2.0f}) {
    const GradientProcessingResult expected = plain.ProcessGradients(Gradients(1024.0f, fp32_peak));
    const GradientProcessingResult result = layer.ProcessGradients(Gradients(1024.0f, fp32_peak));
    BOOST_TEST(!result.ShouldSkip);
    BOOST_TEST(layer.LastAmax().value_or(-1.0f) == std::max(fp32_peak, 3.0f));
    for (const auto& [name, tensor] : expected.Gradients) {
      BOOST_TEST(result.Gradients.at(name)->ToFloatVector() == tensor->ToFloatVector(),
                 boost::test_tools::per_element());
    }
  }
  // A skipped step reports the amax of its finite values, in either dtype.
  BOOST_TEST(layer.ProcessGradients(Gradients(1024.0f, 2.0f, kInf)).ShouldSkip);
  BOOST_TEST(layer.LastAmax().value_or(-1.0f) == 3.0f);
  const float scale = layer.CurrentScale();
  GradientMap poisoned = Gradients(scale, 5.0f);
  poisoned.emplace("nan", FromVector({std::numeric_limits<float>::quiet_NaN()}, {1}));
  BOOST_TEST(layer.ProcessGradients(poisoned).ShouldSkip);
  BOOST_TEST(layer.LastAmax().value_or(-1.0f) == 5.0f);

  layer.SetAmaxTracking(false);
  BOOST_TEST(!layer.LastAmax().has_value());
  BOOST_TEST(!layer.ProcessGradients(Gradients(layer.CurrentScale(), 2.0f)).ShouldSkip);
  BOOST_TEST(!layer.LastAmax().has_value());
}

BOOST_AUTO_TEST_CASE(WithClippingFromTheWritingPass) {
  for (const float max_norm : {100.0f, 1.0f}) {  // not clipping, then clipping every step
    BOOST_TEST_CONTEXT("MaxGradNorm " << max_norm) {
      const MixedPrecisionOptions options{
          .InitialLossScale = 1024.0f, .EnableGradientClipping = true, .MaxGradNorm = max_norm};
      GradientConversionLayer plain(options);
      GradientConversionLayer layer(options);
      layer.SetAmaxTracking(true);
      const GradientProcessingResult expected = plain.ProcessGradients(Gradients(1024.0f, 7.0f));
      const GradientProcessingResult result = layer.ProcessGradients(Gradients(1024.0f, 7.0f));
      BOOST_TEST(!result.ShouldSkip);
      // The unclipped amax (7), recovered from the clipped values to within a few ulps.
      BOOST_TEST(layer.LastAmax().value_or(-1.0f) == 7.0f, boost::test_tools::tolerance(1e-6f));
      for (const auto& [name, tensor] : expected.Gradients) {  // tracking changes no result
        BOOST_TEST(result.Gradients.at(name)->ToFloatVector() == tensor->ToFloatVector(),
                   boost::test_tools::per_element());
      }
      // A step that the norm pass skips has no amax.
      BOOST_TEST(layer.ProcessGradients(Gradients(layer.CurrentScale(), 2.0f, kInf)).ShouldSkip);
      BOOST_TEST(!layer.LastAmax().has_value());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
