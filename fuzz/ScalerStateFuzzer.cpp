// Fuzz target: LoadStateDict of the three dynamic-scaler front-ends
// (amp::DynamicLossScaler, optimizers::mixed_precision::DynamicLossScaler,
// distributed::fsdp::FSDPMixedPrecisionManager).
//
// Properties: any bytes are accepted or rejected with ArgumentError, and a
// rejected blob leaves the scaler exactly as it was (same StateDict). An
// accepted blob gives a scaler whose scale is finite and in [min, max], whose
// StateDict loads back to the same bytes, and which stays finite and in range
// (and free of undefined behaviour) through the update steps that follow.
//
// Input: byte 0 picks the front-end, byte 1 flags (bit 0: re-seal the
// checksum), byte 2 the number of update steps, then one byte per step (bit 0:
// overflow), then the blob.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include "FuzzSupport.hpp"

using namespace mlframework;
using mlframework::fuzz::PropertyFailed;
namespace mp = mlframework::optimizers::mixed_precision;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

constexpr std::size_t kMaxSteps = 64;

void CheckScale(float scale, float min_scale, float max_scale) {
  if (!std::isfinite(scale) || scale <= 0.0f) {
    PropertyFailed("scale is not finite and positive");
  }
  if (scale < min_scale || scale > max_scale) {
    PropertyFailed("scale left [min, max]");
  }
}

// Loads @p blob into @p scaler; on rejection the scaler must be unchanged.
template <typename Scaler>
bool Load(Scaler& scaler, const std::vector<std::byte>& blob) {
  const std::vector<std::byte> before = scaler.StateDict();
  try {
    scaler.LoadStateDict(blob);
    return true;
  } catch (const ArgumentError&) {
    if (scaler.StateDict() != before) {
      PropertyFailed("a rejected blob changed the scaler");
    }
    return false;
  }
}

template <typename Scaler>
void CheckRoundTrip(const Scaler& scaler, Scaler& fresh) {
  const std::vector<std::byte> saved = scaler.StateDict();
  if (!Load(fresh, saved) || fresh.StateDict() != saved) {
    PropertyFailed("StateDict of an accepted blob does not load back to the same bytes");
  }
}

void FuzzAmp(const std::vector<std::byte>& blob, const std::vector<bool>& steps) {
  amp::DynamicLossScaler scaler;
  if (!Load(scaler, blob)) {
    return;
  }
  amp::DynamicLossScaler fresh;
  CheckRoundTrip(scaler, fresh);
  const amp::DynamicScalerConfig& config = scaler.Config();
  CheckScale(scaler.CurrentScale(), config.MinScale, config.MaxScale);
  for (const bool overflow : steps) {
    scaler.UpdateScale(overflow);
    CheckScale(scaler.CurrentScale(), config.MinScale, config.MaxScale);
  }
}

void FuzzMixed(const std::vector<std::byte>& blob, const std::vector<bool>& steps) {
  mp::DynamicLossScaler scaler;
  if (!Load(scaler, blob)) {
    return;
  }
  mp::DynamicLossScaler fresh;
  CheckRoundTrip(scaler, fresh);
  const float min_scale = scaler.FellBackToFP32() ? 1.0f : scaler.Options().MinLossScale;
  const float max_scale = scaler.FellBackToFP32() ? 1.0f : scaler.Options().MaxLossScale;
  CheckScale(scaler.CurrentScale(), min_scale, max_scale);
  for (const bool overflow : steps) {
    (void)scaler.UpdateScale(overflow);
    CheckScale(scaler.CurrentScale(), min_scale, max_scale);
  }
}

void FuzzFsdpManager(const std::vector<std::byte>& blob, const std::vector<bool>& steps) {
  fsdp::FSDP instance(distributed::MakeLocalProcessGroup());
  fsdp::FSDPMixedPrecisionManager manager({}, instance);
  if (!Load(manager, blob)) {
    return;
  }
  fsdp::FSDP fresh_instance(distributed::MakeLocalProcessGroup());
  fsdp::FSDPMixedPrecisionManager fresh({}, fresh_instance);
  CheckRoundTrip(manager, fresh);
  const auto& config = manager.Config();
  CheckScale(manager.CurrentScale(), config.MinLossScale, config.MaxLossScale);
  const TensorPtr clean = FromVector({1.0f}, {1}, DataType::Float16);
  const TensorPtr inf = FromVector({std::numeric_limits<float>::infinity()}, {1}, DataType::Float16);
  for (const bool overflow : steps) {
    (void)manager.CheckOverflow(GradientMap{{"w", overflow ? inf : clean}});
    CheckScale(manager.CurrentScale(), config.MinLossScale, config.MaxLossScale);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlframework::fuzz::FuzzInput input(data, size);
  const std::uint8_t front_end = input.Byte();
  const std::uint8_t flags = input.Byte();
  const std::size_t step_count = input.Byte() % (kMaxSteps + 1);
  std::vector<bool> steps;
  for (std::size_t i = 0; i < step_count; ++i) {
    steps.push_back((input.Byte() & 1U) != 0);
  }
  std::vector<std::byte> blob = input.Rest();
  if ((flags & 1U) != 0) {
    mlframework::fuzz::ResealChecksum(blob);
  }
  switch (front_end % 3) {
    case 0:
      FuzzAmp(blob, steps);
      break;
    case 1:
      FuzzMixed(blob, steps);
      break;
    default:
      FuzzFsdpManager(blob, steps);
  }
  return 0;
}
