#include <mlframework/amp/GradScalerFactory.hpp>

#include <mlframework/amp/ScaleFactor.hpp>

namespace mlframework::amp {

GradScaler GradScalerFactory::CreateDefault() { return GradScaler(DynamicScalerConfig{}); }
GradScaler GradScalerFactory::CreateStatic() { return GradScaler::Static(ScaleFactor::Moderate); }
GradScaler GradScalerFactory::CreateStatic(float scale) { return GradScaler::Static(scale); }
GradScaler GradScalerFactory::CreateConservative() { return GradScaler(DynamicScalerConfig{.GrowthInterval = 5000}); }
GradScaler GradScalerFactory::CreateAggressive() { return GradScaler(DynamicScalerConfig{.GrowthInterval = 1000}); }
GradScaler GradScalerFactory::CreateForFP16() {
  return GradScaler(
      DynamicScalerConfig{.InitialScale = ScaleFactor::GetRecommendedScale(DataType::Float16), .GrowthInterval = 2000});
}
GradScaler GradScalerFactory::CreateForBF16() {
  return GradScaler::Static(ScaleFactor::GetRecommendedScale(DataType::BFloat16));
}
GradScaler GradScalerFactory::CreateFromConfig(DynamicScalerConfig config) { return GradScaler(config); }

}  // namespace mlframework::amp
