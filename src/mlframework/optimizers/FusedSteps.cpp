#include <mlframework/optimizers/FusedSteps.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"
#include "mlframework/core/MemoryOverlap.hpp"
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

// The dtype a state stored as @p format has: its own for the FP32/BF16/FP16 formats,
// Float8E4M3FN for the FP8 codes; the linear 8-bit codes take any one-byte dtype.
bool StateDTypeFits(StateFormat format, DataType dtype) {
  switch (format) {
    case StateFormat::Float32:
      return dtype == DataType::Float32;
    case StateFormat::BFloat16:
      return dtype == DataType::BFloat16;
    case StateFormat::Float16:
      return dtype == DataType::Float16;
    case StateFormat::Int8Block:
    case StateFormat::UInt8Block:
      return ElementSize(dtype) == 1;
    case StateFormat::Float8E4M3Block:
      return dtype == DataType::Float8E4M3FN;
  }
  return false;
}

std::string Expected(StateFormat format) {
  switch (format) {
    case StateFormat::Int8Block:
    case StateFormat::UInt8Block:
      return "a one-byte dtype (the codes of " + std::string(ToString(format)) + ")";
    case StateFormat::Float8E4M3Block:
      return "Float8E4M3FN (the codes of Float8E4M3Block)";
    default:
      return ToString(format);
  }
}

// One state's format: a known one, fit for the moment it stores (signed codes for the first,
// unsigned for the second), Float32 when the step keeps no such state.
void CheckStateFormat(StateFormat format, const char* name, bool used, bool second) {
  const auto value = static_cast<unsigned>(format);
  if (value > static_cast<unsigned>(StateFormat::Float8E4M3Block)) {
    throw ArgumentError(std::string("lists.") + name, "is " + std::to_string(value) + ", not a StateFormat");
  }
  if (!used && format != StateFormat::Float32) {
    throw ArgumentError(std::string("lists.") + name,
                        "is " + std::string(ToString(format)) + " but the step keeps no such state (expected Float32)");
  }
  if (second ? format == StateFormat::Int8Block : format == StateFormat::UInt8Block) {
    throw ArgumentError(std::string("lists.") + name, "is " + std::string(ToString(format)) + "; " +
                                                          (second ? "the second moment takes UInt8Block codes"
                                                                  : "unsigned codes hold only the second moment"));
  }
}

// The formats of @p lists (ArgumentError naming the field and its value).
void CheckFormats(const OptimizerStepLists& lists, const ListRules& rules) {
  CheckStateFormat(lists.FirstStateFormat, "FirstStateFormat", rules.first, false);
  CheckStateFormat(lists.SecondStateFormat, "SecondStateFormat", rules.second, true);
  // Checked whatever the formats, as AdamOptions and SGDOptions check it: the CPU kernels size
  // every staged step's tiles by whole blocks, so a BF16 state's step with blocks of 4096 elements
  // would overrun them and blocks of 0 would divide by zero.
  const std::size_t block = lists.StateBlockSize;
  if (block < 32 || block > 2048 || (block & (block - 1)) != 0) {
    throw ArgumentError("lists.StateBlockSize",
                        "is " + std::to_string(block) + "; a block is a power of two from 32 to 2048 elements");
  }
  const auto masters = static_cast<unsigned>(lists.Masters);
  if (masters > static_cast<unsigned>(MasterFormat::BFloat16Remainder)) {
    throw ArgumentError("lists.Masters", "is " + std::to_string(masters) + ", not a MasterFormat");
  }
  if (lists.Masters != MasterFormat::Float32 && !lists.LowPrecisionCopies.empty()) {
    throw ArgumentError("lists.LowPrecisionCopies", "holds " + std::to_string(lists.LowPrecisionCopies.size()) +
                                                        " tensors but the masters are " + ToString(lists.Masters) +
                                                        ": the BF16 parameters are their own low-precision copy");
  }
}

// Entry i of @p list: non-null, @p count elements, a dtype @p fits accepts (else names @p expected).
template <class Fits>
const ITensor& CheckedAs(std::span<const TensorPtr> list, const char* name, std::size_t i, std::size_t count,
                         Fits&& fits, const std::string& expected) {
  const TensorPtr& tensor = list[i];
  if (!tensor) {
    throw ArgumentNullError(Entry(name, i));
  }
  if (!fits(tensor->GetDataType())) {
    throw ArgumentError(Entry(name, i),
                        "has dtype " + std::string(ToString(tensor->GetDataType())) + ", expected " + expected);
  }
  if (tensor->Size() != count) {
    throw ArgumentError(Entry(name, i),
                        "has " + std::to_string(tensor->Size()) + " elements, expected " + std::to_string(count));
  }
  return *tensor;
}

// The tensors of a step with their entries' names, for RequireOwnMemory().
struct StepTensors {
  std::vector<mlframework::detail::MemoryUse> uses;
  std::vector<std::pair<const char*, std::size_t>> entries;  // list and index of each use

  void Add(const mlframework::detail::MemoryUse& use, const char* list, std::size_t i) {
    uses.push_back(use);
    entries.emplace_back(list, i);
  }
  void Clear() noexcept {
    uses.clear();
    entries.clear();
  }
};

// The uses of the last lists found to share no memory. A training step passes the same lists
// every step, and sorting them costs more than a step over small tensors; whether a list shares
// memory is a function of its uses alone (ranges, object addresses, written flags), so lists with
// uses equal to those of a list checked before have the same answer, whatever tensors they hold.
class CheckedUses {
 public:
  static constexpr std::size_t kEntries = 4;

  bool Contains(const std::vector<mlframework::detail::MemoryUse>& uses) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::ranges::find(entries_, uses);
    if (it == entries_.end()) {
      return false;
    }
    std::rotate(entries_.begin(), it, it + 1);  // most recently used first
    return true;
  }

  void Add(std::vector<mlframework::detail::MemoryUse> uses) {
    const std::lock_guard<std::mutex> lock(mutex_);
    entries_.insert(entries_.begin(), std::move(uses));
    if (entries_.size() > kEntries) {
      entries_.pop_back();
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<mlframework::detail::MemoryUse>> entries_;
};

// ArgumentError naming both entries when a tensor the step writes shares memory with any other
// tensor of the step: a parameter listed twice would be updated twice, and a state or parameter
// over another entry's memory would be read after the step has changed it. Only gradients, read
// and never written, may share memory with each other (one gradient for two parameters).
void RequireOwnMemory(const StepTensors& tensors) {
  static CheckedUses checked;
  if (tensors.uses.size() < 2 || checked.Contains(tensors.uses)) {
    return;
  }
  const auto shared = mlframework::detail::FindSharedMemory(tensors.uses);
  if (!shared) {
    checked.Add(tensors.uses);
    return;
  }
  const auto name = [&](std::size_t use) {
    const auto& [list, i] = tensors.entries[use];
    return list == std::string_view("StepCount") ? std::string("lists.StepCount") : Entry(list, i);
  };
  const std::string later = name(shared->Later);
  const std::string earlier = name(shared->Earlier);
  const char* relation = !shared->Same                            ? "overlaps the memory of "
                         : tensors.uses[shared->Later].IsObject() ? "is the same tensor as "
                                                                  : "is the same memory as ";
  throw ArgumentError(later, relation + earlier + ": a tensor the step writes needs memory of its own");
}

// The backend that runs a checked list: the device tensors' backend, or, for host memory, the CPU
// backend (which also takes host memory of tensors without a backend).
struct Route {
  const TensorBackend* backend = nullptr;
  bool on_host = true;
};

// Checks @p lists against @p rules (ArgumentError naming the entry, nothing written) and finds the route.
Route Check(const OptimizerStepLists& lists, const ListRules& rules) {
  CheckFormats(lists, rules);
  const std::size_t n = lists.Parameters.size();
  RequireLength(lists.Gradients, "Gradients", n);
  RequireLength(lists.FirstState, "FirstState", rules.first ? n : 0);
  RequireLength(lists.SecondState, "SecondState", rules.second ? n : 0);
  if (!lists.LowPrecisionCopies.empty()) {
    RequireLength(lists.LowPrecisionCopies, "LowPrecisionCopies", n);
  }
  const bool first_scaled = IsBlockScaled(lists.FirstStateFormat);
  const bool second_scaled = IsBlockScaled(lists.SecondStateFormat);
  const bool fp32_masters = lists.Masters == MasterFormat::Float32;
  const bool remainders = lists.Masters == MasterFormat::BFloat16Remainder;
  RequireLength(lists.FirstStateScales, "FirstStateScales", first_scaled ? n : 0);
  RequireLength(lists.SecondStateScales, "SecondStateScales", second_scaled ? n : 0);
  RequireLength(lists.ParameterRemainders, "ParameterRemainders", remainders ? n : 0);
  if (!lists.ElementOffsets.empty() && lists.ElementOffsets.size() != n) {
    throw ArgumentError("lists.ElementOffsets", "holds " + std::to_string(lists.ElementOffsets.size()) +
                                                    " offsets, expected none or " + std::to_string(n));
  }
  const auto is_fp32 = [](DataType dtype) { return dtype == DataType::Float32; };
  const auto is_bf16 = [](DataType dtype) { return dtype == DataType::BFloat16; };
  const auto two_bytes = [](DataType dtype) { return ElementSize(dtype) == 2; };
  const std::string masters_dtype =
      fp32_masters ? "Float32" : "BFloat16 (the masters are " + std::string(ToString(lists.Masters)) + ")";
  bool any_host = false;
  bool any_device = false;
  const TensorBackend* backend = nullptr;
  // Every tensor of the call: host memory, or the first parameter's backend.
  // The entry's name is built only for an error: a step checks thousands of tensors.
  // Kept by each thread from call to call: a step over a list of small tensors is short.
  // (Its address taken once: each access to a thread_local of a shared library is a call.)
  thread_local StepTensors per_thread;
  StepTensors& tensors = per_thread;
  tensors.Clear();
  auto place = [&](const ITensor& tensor, const char* list, std::size_t i, bool written = true) {
    if (tensor.Size() == 0) {
      return;  // nothing to update: runs anywhere
    }
    const mlframework::detail::MemoryUse use = mlframework::detail::MemoryUse::Of(tensor, written);
    tensors.Add(use, list, i);
    if (!use.IsObject()) {
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
    const ITensor& parameter = CheckedAs(lists.Parameters, "Parameters", i, lists.Parameters[i]->Size(),
                                         fp32_masters ? +is_fp32 : +is_bf16, masters_dtype);
    const std::size_t count = parameter.Size();
    const std::size_t blocks = StateBlockCount(count, lists.StateBlockSize);
    if (!lists.ElementOffsets.empty() && lists.ElementOffsets[i] > std::numeric_limits<std::uint64_t>::max() - count) {
      throw ArgumentError(Entry("ElementOffsets", i), "is " + std::to_string(lists.ElementOffsets[i]) +
                                                          "; plus the parameter's " + std::to_string(count) +
                                                          " elements it exceeds 2^64 - 1");
    }
    place(parameter, "Parameters", i);
    place(Checked(lists.Gradients, "Gradients", i, count), "Gradients", i, /*written=*/false);
    if (remainders) {
      place(CheckedAs(lists.ParameterRemainders, "ParameterRemainders", i, count, two_bytes,
                      "a two-byte dtype (16-bit remainders)"),
            "ParameterRemainders", i);
    }
    if (rules.first) {
      const StateFormat format = lists.FirstStateFormat;
      place(CheckedAs(
                lists.FirstState, "FirstState", i, count, [&](DataType d) { return StateDTypeFits(format, d); },
                Expected(format)),
            "FirstState", i);
      if (first_scaled) {
        place(CheckedAs(lists.FirstStateScales, "FirstStateScales", i, blocks, is_fp32, "Float32"), "FirstStateScales",
              i);
      }
    }
    if (rules.second) {
      const StateFormat format = lists.SecondStateFormat;
      place(CheckedAs(
                lists.SecondState, "SecondState", i, count, [&](DataType d) { return StateDTypeFits(format, d); },
                Expected(format)),
            "SecondState", i);
      if (second_scaled) {
        place(CheckedAs(lists.SecondStateScales, "SecondStateScales", i, blocks, is_fp32, "Float32"),
              "SecondStateScales", i);
      }
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
  RequireOwnMemory(tensors);
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
  uncounted.RoundingStep = static_cast<std::uint64_t>(count) + 1;  // the step being taken
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
