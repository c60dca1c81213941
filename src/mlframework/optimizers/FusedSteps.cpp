#include <mlframework/optimizers/FusedSteps.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework::optimizers {

namespace {

// What a step needs of each list beyond the parameters.
struct ListRules {
  bool first = false;   // FirstState holds one tensor per parameter (else it must be empty)
  bool second = false;  // SecondState likewise
};

std::string Entry(const char* list, std::size_t i) {
  return std::string("lists.") + list + "[" + std::to_string(i) + "]";
}

void RequireLength(std::span<const TensorPtr> list, const char* name, std::size_t expected) {
  if (list.size() != expected) {
    throw ArgumentError(std::string("lists.") + name,
                        "holds " + std::to_string(list.size()) + " tensors, expected " + std::to_string(expected));
  }
}

// Entry i of @p list: non-null, @p count elements, FP32 (or FP16/BF16 when @p low_precision).
const ITensor& Checked(std::span<const TensorPtr> list, const char* name, std::size_t i, std::size_t count,
                       bool low_precision = false) {
  const TensorPtr& tensor = list[i];
  if (!tensor) {
    throw ArgumentNullError(Entry(name, i));
  }
  const DataType dtype = tensor->GetDataType();
  const bool dtype_ok =
      low_precision ? (dtype == DataType::Float16 || dtype == DataType::BFloat16) : dtype == DataType::Float32;
  if (!dtype_ok) {
    throw ArgumentError(Entry(name, i), "has dtype " + std::string(ToString(dtype)) + ", expected " +
                                            (low_precision ? "Float16 or BFloat16" : "Float32"));
  }
  if (tensor->Size() != count) {
    throw ArgumentError(Entry(name, i), "has " + std::to_string(tensor->Size()) + " elements but the parameter has " +
                                            std::to_string(count));
  }
  return *tensor;
}

// Steps a count in FP32 holds exactly, each one more than the last.
constexpr float kMaxStepCount = 16777215.0f;  // 2^24 - 1

// The value of a step count in host memory: a whole number in [0, kMaxStepCount].
float HostStepCount(const ITensor& step_count) {
  float count = 0.0f;
  std::memcpy(&count, step_count.HostBytes().data(), sizeof count);
  if (!(count >= 0.0f && count <= kMaxStepCount && std::floor(count) == count)) {
    throw ArgumentError("lists.StepCount",
                        "holds " + std::to_string(count) + "; a step count is a whole number from 0 to 16777215");
  }
  return count;
}

// StepSize and BiasCorrection2Sqrt of step @p step (>= 1) from s.BiasCorrection.
void SetBiasCorrections(AdamStepScalars& s, double step) {
  // torch/optim/adam.py (_single_tensor_adam) computes these as Python floats (doubles): `beta**step`
  // and `bias_correction2**0.5` are C's pow(); each is rounded to FP32 once, when it meets an FP32 tensor.
  const double bias_correction1 = 1.0 - std::pow(s.BiasCorrection.Beta1, step);
  const double bias_correction2 = 1.0 - std::pow(s.BiasCorrection.Beta2, step);
  s.StepSize = static_cast<float>(s.BiasCorrection.LearningRate / bias_correction1);
  s.BiasCorrection2Sqrt = static_cast<float>(std::pow(bias_correction2, 0.5));
}

// The backend that runs a checked list: the device tensors' backend, or, for host memory, the CPU
// backend (which also takes host memory of tensors without a backend).
struct Route {
  const TensorBackend* backend = nullptr;
  bool on_host = true;
};

// Checks @p lists against @p rules (ArgumentError naming the entry, nothing written) and finds the route.
Route Check(const OptimizerStepLists& lists, const ListRules& rules) {
  const std::size_t n = lists.Parameters.size();
  RequireLength(lists.Gradients, "Gradients", n);
  RequireLength(lists.FirstState, "FirstState", rules.first ? n : 0);
  RequireLength(lists.SecondState, "SecondState", rules.second ? n : 0);
  if (!lists.LowPrecisionCopies.empty()) {
    RequireLength(lists.LowPrecisionCopies, "LowPrecisionCopies", n);
  }
  bool any_host = false;
  bool any_device = false;
  const TensorBackend* backend = nullptr;
  // Every tensor of the call: host memory, or the first parameter's backend.
  // The entry's name is built only for an error: a step checks thousands of tensors.
  auto place = [&](const ITensor& tensor, const char* list, std::size_t i) {
    if (tensor.Size() == 0) {
      return;  // nothing to update: runs anywhere
    }
    if (!tensor.HostBytes().empty()) {
      any_host = true;
      return;
    }
    any_device = true;
    if (tensor.Backend() == nullptr) {
      throw ArgumentError(Entry(list, i), "has neither host memory nor a backend: no kernel can update it");
    }
    if (backend == nullptr) {
      backend = tensor.Backend();
    }
    if (tensor.Backend() != backend) {
      throw ArgumentError(Entry(list, i), "is on another backend than the list's other device tensors");
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    // The tensor objects lie scattered on the heap: ask for them a few entries ahead.
    mlframework::detail::PrefetchStepEntry(lists, i + mlframework::detail::kObjectPrefetchAhead);
    if (!lists.Parameters[i]) {
      throw ArgumentNullError(Entry("Parameters", i));
    }
    const ITensor& parameter = Checked(lists.Parameters, "Parameters", i, lists.Parameters[i]->Size());
    const std::size_t count = parameter.Size();
    place(parameter, "Parameters", i);
    place(Checked(lists.Gradients, "Gradients", i, count), "Gradients", i);
    if (rules.first) {
      place(Checked(lists.FirstState, "FirstState", i, count), "FirstState", i);
    }
    if (rules.second) {
      place(Checked(lists.SecondState, "SecondState", i, count), "SecondState", i);
    }
    if (!lists.LowPrecisionCopies.empty() && lists.LowPrecisionCopies[i]) {
      place(Checked(lists.LowPrecisionCopies, "LowPrecisionCopies", i, count, true), "LowPrecisionCopies", i);
    }
  }
  if (lists.StepCount) {
    const ITensor& step_count = *lists.StepCount;
    if (step_count.GetDataType() != DataType::Float32 || step_count.Size() != 1) {
      throw ArgumentError("lists.StepCount", "is a " + std::string(ToString(step_count.GetDataType())) + " tensor of " +
                                                 std::to_string(step_count.Size()) +
                                                 " elements; a step count is one FP32 element");
    }
    place(step_count, "StepCount", 0);
    if (!any_device) {
      static_cast<void>(HostStepCount(step_count));  // its value, checked before anything is written
    }
  }
  if (any_host && any_device) {
    throw ArgumentError("lists", "mixes host-memory tensors with device tensors; pass one kind per call");
  }
  if (any_device) {
    return Route{.backend = backend, .on_host = false};
  }
  return Route{.backend = &mlframework::detail::BackendOf(Device::CPU()), .on_host = true};
}

[[noreturn]] void NoFusedStep(const TensorBackend& backend, const char* what) {
  throw InvalidOperationError("the '" + std::string(backend.Name()) + "' tensor backend has no fused " + what +
                              " step for these tensors");
}

// One checked step on @p route: run(lists, scalars, skip_if_found_inf) on its backend. Host lists read a found-inf
// flag here (a set flag: no pass, false) and their step count too: at_count(scalars, count) makes
// the scalars of step count + 1, the backend runs without the count, and count + 1 is written after.
// A device backend reads both on the device.
template <typename Scalars, typename AtCount, typename Run>
bool Step(const Route& route, const OptimizerStepLists& lists, const Scalars& scalars,
          const DeviceScaleState* skip_if_found_inf, const char* what, AtCount&& at_count, Run&& run) {
  if (!route.on_host || !lists.StepCount) {
    if (route.on_host && skip_if_found_inf != nullptr && skip_if_found_inf->FoundInf()) {
      return false;  // a skipped step reads nothing
    }
    if (!run(lists, scalars, skip_if_found_inf)) {
      NoFusedStep(*route.backend, what);
    }
    return true;
  }
  if (skip_if_found_inf != nullptr && skip_if_found_inf->FoundInf()) {
    return false;  // nor does it count
  }
  const float count = HostStepCount(*lists.StepCount);
  Scalars at = scalars;
  at_count(at, count);
  OptimizerStepLists uncounted = lists;
  uncounted.StepCount = nullptr;
  if (!run(uncounted, at, nullptr)) {
    NoFusedStep(*route.backend, what);
  }
  const float next = count + 1.0f;
  std::memcpy(lists.StepCount->MutableHostBytes().data(), &next, sizeof next);
  return true;
}

}  // namespace

AdamStepScalars AdamStepScalarsFor(const AdamOptions& options, std::int64_t step) {
  options.Validate();
  if (step < 1) {
    throw ArgumentError("step", "must be >= 1 (the first step is 1), got " + std::to_string(step));
  }
  AdamStepScalars s;
  s.BiasCorrection = {.LearningRate = options.LearningRate, .Beta1 = options.Beta1, .Beta2 = options.Beta2};
  SetBiasCorrections(s, static_cast<double>(step));
  // `1 - beta1` is lerp_'s weight, rounded to FP32 like the bias corrections.
  s.FirstMomentWeight = static_cast<float>(1.0 - options.Beta1);
  s.Beta2 = static_cast<float>(options.Beta2);
  s.SecondMomentWeight = static_cast<float>(1.0 - options.Beta2);
  s.Epsilon = static_cast<float>(options.Epsilon);
  s.L2 = options.DecoupledWeightDecay ? 0.0f : static_cast<float>(options.WeightDecay);
  s.Decay = options.DecoupledWeightDecay ? static_cast<float>(1.0 - options.LearningRate * options.WeightDecay) : 1.0f;
  return s;
}

SGDStepScalars SGDStepScalarsFor(const SGDOptions& options, bool first_step) {
  options.Validate();
  return SGDStepScalars{.LearningRate = static_cast<float>(options.LearningRate),
                        .Momentum = static_cast<float>(options.Momentum),
                        .WeightDecay = static_cast<float>(options.WeightDecay),
                        .GradientWeight = static_cast<float>(1.0 - options.Dampening),
                        .Nesterov = options.Nesterov,
                        .FirstStep = first_step};
}

bool FusedAdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars,
                   const DeviceScaleState* skip_if_found_inf) {
  const Route route = Check(lists, ListRules{.first = true, .second = true});
  return Step(
      route, lists, scalars, skip_if_found_inf, "Adam",
      [](AdamStepScalars& at, float count) { SetBiasCorrections(at, static_cast<double>(count) + 1.0); },
      [&](const OptimizerStepLists& run, const AdamStepScalars& at, const DeviceScaleState* skip) {
        return route.backend->AdamStep(run, at, skip);
      });
}

bool FusedSGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars,
                  const DeviceScaleState* skip_if_found_inf) {
  const Route route = Check(lists, ListRules{.first = scalars.Momentum != 0.0f, .second = false});
  return Step(
      route, lists, scalars, skip_if_found_inf, "SGD",
      [](SGDStepScalars& at, float count) { at.FirstStep = count == 0.0f; },
      [&](const OptimizerStepLists& run, const SGDStepScalars& at, const DeviceScaleState* skip) {
        return route.backend->SGDStep(run, at, skip);
      });
}

}  // namespace mlframework::optimizers
