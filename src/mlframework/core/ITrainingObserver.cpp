#include <mlframework/core/ITrainingObserver.hpp>

namespace mlframework {

ITrainingObserver::~ITrainingObserver() = default;
void ITrainingObserver::OnOverflow(const OverflowReport& /*report*/) {}
void ITrainingObserver::OnSkippedStep(std::int64_t /*step*/, float /*loss_scale*/) {}
void ITrainingObserver::OnScaleGrowth(std::int64_t /*step*/, float /*old_scale*/, float /*new_scale*/) {}
void ITrainingObserver::OnScaleBackoff(std::int64_t /*step*/, float /*old_scale*/, float /*new_scale*/) {}
void ITrainingObserver::OnFallbackToFP32(std::int64_t /*step*/) {}
void ITrainingObserver::OnClipping(std::int64_t /*step*/, float /*norm_before_clipping*/, float /*coefficient*/) {}
void ITrainingObserver::OnStep(const StepEvent& /*event*/) {}

}  // namespace mlframework
