#include <mlframework/optimizers/Adam.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/optimizers/ParameterSet.hpp"

namespace mlframework::optimizers {

namespace {

constexpr char kAdamKind[] = "optimizers.Adam";
constexpr std::uint16_t kAdamVersion = 2;  // 2: the options as doubles

}  // namespace

void AdamOptions::Validate() const {
  detail::RequirePositive(LearningRate, "LearningRate");
  detail::RequireFraction(Beta1, "Beta1");
  detail::RequireFraction(Beta2, "Beta2");
  detail::RequirePositive(Epsilon, "Epsilon");
  detail::RequireNonNegative(WeightDecay, "WeightDecay");
}

struct Adam::Impl {
  Impl(GradientMap parameters, AdamOptions opts) : options(opts), params(std::move(parameters)) {
    std::vector<Shape> shapes;
    for (std::size_t t = 0; t < params.Count(); ++t) {
      shapes.push_back({params.Size(t)});
    }
    exp_avg = ZerosContiguous(shapes, DataType::Float32, Device::CPU());
    exp_avg_sq = ZerosContiguous(shapes, DataType::Float32, Device::CPU());
  }
  AdamOptions options;
  detail::ParameterSet params;
  std::vector<TensorPtr> exp_avg;     // first moments, FP32 host tensors
  std::vector<TensorPtr> exp_avg_sq;  // second moments, FP32 host tensors
  std::int64_t steps = 0;
};

Adam::Adam(GradientMap parameters, AdamOptions options) {
  options.Validate();
  impl_ = std::make_unique<Impl>(std::move(parameters), options);
}

Adam::~Adam() = default;

GradientMap Adam::GetGradients() { return impl_->params.Gradients(); }

void Adam::SetGradients(const GradientMap& gradients) { impl_->params.SetGradients(gradients); }

void Adam::Step() {
  Impl& s = *impl_;
  s.params.RequireGradients("Adam");
  const std::vector<TensorPtr> gradients = s.params.Float32Gradients();
  std::vector<TensorPtr> low_precision(s.params.Count());
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    low_precision[t] = s.params.FusedCopy(t);
  }
  const std::int64_t step = s.steps + 1;
  // One fused pass: masters, gradients and moments read once, masters and moments written once,
  // and FP16/BF16 parameters in host memory rounded from the updated masters in the same pass.
  FusedAdamStep(OptimizerStepLists{.Parameters = s.params.MasterList(),
                                   .Gradients = gradients,
                                   .FirstState = s.exp_avg,
                                   .SecondState = s.exp_avg_sq,
                                   .LowPrecisionCopies = low_precision},
                AdamStepScalarsFor(s.options, step));
  s.params.WriteBackUnfused();
  s.steps = step;
}

bool Adam::Step(const DeviceScaleState& skip_if_found_inf) {
  if (skip_if_found_inf.FoundInf()) {
    return false;
  }
  Step();
  return true;
}

const GradientMap& Adam::Parameters() const noexcept { return impl_->params.Parameters(); }
const GradientMap& Adam::MasterWeights() const noexcept { return impl_->params.Masters(); }
const AdamOptions& Adam::Options() const noexcept { return impl_->options; }

void Adam::SetLearningRate(double learning_rate) {
  detail::RequirePositive(learning_rate, "learning_rate");
  impl_->options.LearningRate = learning_rate;
}

std::int64_t Adam::StepCount() const noexcept { return impl_->steps; }

std::span<const float> Adam::FirstMoments(const std::string& name) const {
  return detail::Floats(*impl_->exp_avg[impl_->params.IndexOf(name, "name")]);
}

std::span<const float> Adam::SecondMoments(const std::string& name) const {
  return detail::Floats(*impl_->exp_avg_sq[impl_->params.IndexOf(name, "name")]);
}

void Adam::RestoreState(const std::map<std::string, AdamParameterState>& state, std::int64_t steps) {
  Impl& s = *impl_;
  if (steps < 0) {
    throw ArgumentError("steps", "must be >= 0, got " + std::to_string(steps));
  }
  s.params.RequireSameNames(
      state.size(), [&](const std::string& name) { return state.count(name) != 0; }, "state");
  std::vector<std::vector<float>> masters;
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    const AdamParameterState& entry = state.at(s.params.Name(t));
    s.params.RequireLength(entry.Master.size(), t, "master weights", "state");
    s.params.RequireLength(entry.FirstMoments.size(), t, "first moments", "state");
    s.params.RequireLength(entry.SecondMoments.size(), t, "second moments", "state");
    masters.push_back(entry.Master);
  }
  // Everything checked: commit.
  s.params.CommitMasters(masters);
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    const AdamParameterState& entry = state.at(s.params.Name(t));
    s.exp_avg[t]->CopyFromFloats(entry.FirstMoments);
    s.exp_avg_sq[t]->CopyFromFloats(entry.SecondMoments);
  }
  s.steps = steps;
}

std::string Adam::StateKind() const { return "Adam"; }

std::vector<std::pair<std::string, double>> Adam::StateOptions() const {
  const AdamOptions& o = impl_->options;
  return {{"Beta1", o.Beta1},
          {"Beta2", o.Beta2},
          {"Epsilon", o.Epsilon},
          {"WeightDecay", o.WeightDecay},
          {"DecoupledWeightDecay", o.DecoupledWeightDecay ? 1.0 : 0.0}};
}

double Adam::StateLearningRate() const noexcept { return impl_->options.LearningRate; }

std::vector<std::string> Adam::StateVectorNames() const { return {"exp_avg", "exp_avg_sq"}; }

std::span<const float> Adam::StateVector(const std::string& name, std::size_t index) const {
  if (index > 1) throw ArgumentError("index", "Adam keeps 2 state vectors (0, 1), got " + std::to_string(index));
  return index == 0 ? FirstMoments(name) : SecondMoments(name);
}

void Adam::ImportState(const std::map<std::string, amp::OptimizerParameterState>& state, std::int64_t steps) {
  std::map<std::string, AdamParameterState> adam_state;
  for (const auto& [name, entry] : state) {
    if (entry.Vectors.size() != 2) {
      throw ArgumentError("state", "parameter '" + name + "' has " + std::to_string(entry.Vectors.size()) +
                                       " state vectors, Adam keeps 2 (exp_avg, exp_avg_sq)");
    }
    adam_state[name] = {entry.Master, entry.Vectors[0], entry.Vectors[1]};
  }
  RestoreState(adam_state, steps);
}

std::vector<std::byte> Adam::StateDict() const {
  const Impl& s = *impl_;
  mlframework::detail::BlobWriter writer(kAdamKind, kAdamVersion);
  writer.F64(s.options.LearningRate);
  writer.F64(s.options.Beta1);
  writer.F64(s.options.Beta2);
  writer.F64(s.options.Epsilon);
  writer.F64(s.options.WeightDecay);
  writer.U8(s.options.DecoupledWeightDecay ? 1 : 0);
  writer.I64(s.steps);
  s.params.SaveMasters(writer);
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    detail::WriteFloats(writer, detail::Floats(*s.exp_avg[t]));
    detail::WriteFloats(writer, detail::Floats(*s.exp_avg_sq[t]));
  }
  return writer.Finish();
}

void Adam::LoadStateDict(std::span<const std::byte> state) {
  Impl& s = *impl_;
  mlframework::detail::BlobReader reader(state, kAdamKind, kAdamVersion);
  AdamOptions options;
  options.LearningRate = reader.F64();
  options.Beta1 = reader.F64();
  options.Beta2 = reader.F64();
  options.Epsilon = reader.F64();
  options.WeightDecay = reader.F64();
  options.DecoupledWeightDecay = reader.Flag("DecoupledWeightDecay");
  detail::ValidateLoaded(options, reader);
  const std::int64_t steps = reader.Count("step count");
  std::vector<std::vector<float>> masters = s.params.ReadMasters(reader);
  std::vector<std::vector<float>> exp_avg;
  std::vector<std::vector<float>> exp_avg_sq;
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    exp_avg.push_back(detail::ReadFloats(reader, s.params.Size(t), "first moments of \"" + s.params.Name(t) + "\""));
    exp_avg_sq.push_back(
        detail::ReadFloats(reader, s.params.Size(t), "second moments of \"" + s.params.Name(t) + "\""));
  }
  reader.ExpectEnd();
  // Everything decoded: commit.
  s.params.CommitMasters(masters);
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    s.exp_avg[t]->CopyFromFloats(exp_avg[t]);
    s.exp_avg_sq[t]->CopyFromFloats(exp_avg_sq[t]);
  }
  s.options = options;
  s.steps = steps;
}

}  // namespace mlframework::optimizers
