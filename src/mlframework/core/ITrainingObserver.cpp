#include <mlframework/core/ITrainingObserver.hpp>

namespace mlframework {

ITrainingObserver::~ITrainingObserver() = default;
void ITrainingObserver::OnOverflow(const OverflowReport& /*report*/) {}
void ITrainingObserver::OnSkippedStep(std::int64_t /*step*/, float /*lossScale*/) {}
void ITrainingObserver::OnScaleGrowth(std::int64_t /*step*/, float /*oldScale*/, float /*newScale*/) {}
void ITrainingObserver::OnScaleBackoff(std::int64_t /*step*/, float /*oldScale*/, float /*newScale*/) {}
void ITrainingObserver::OnFallbackToFP32(std::int64_t /*step*/) {}
void ITrainingObserver::OnClipping(std::int64_t /*step*/, float /*normBeforeClipping*/, float /*coefficient*/) {}
void ITrainingObserver::OnStep(const StepEvent& /*event*/) {}

}  // namespace mlframework
