#include <mlframework/optimizers/SGD.hpp>

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

constexpr char kSGDKind[] = "optimizers.SGD";
constexpr std::uint16_t kSGDVersion = 2;  // 2: the options as doubles, with Dampening

// The momentum buffers of @p values (an empty vector: no buffer yet, null).
std::vector<TensorPtr> MomentumTensors(const std::vector<std::vector<float>>& values) {
  std::vector<TensorPtr> buffers;
  buffers.reserve(values.size());
  for (const std::vector<float>& v : values) {
    buffers.push_back(v.empty() ? nullptr : FromVector(v, {v.size()}));
  }
  return buffers;
}

}  // namespace

void SGDOptions::Validate() const {
  detail::RequirePositive(LearningRate, "LearningRate");
  detail::RequireFraction(Momentum, "Momentum");
  detail::RequireNonNegative(WeightDecay, "WeightDecay");
  if (!(Dampening >= 0.0 && Dampening <= 1.0)) {
    throw ArgumentError("Dampening", "must be in [0, 1], got " + detail::Show(Dampening));
  }
  if (Nesterov && Momentum == 0.0) {
    throw ArgumentError("Nesterov", "needs Momentum > 0, got Momentum " + detail::Show(Momentum));
  }
  if (Nesterov && Dampening != 0.0) {
    throw ArgumentError("Nesterov", "needs Dampening 0 (PyTorch's rule), got Dampening " + detail::Show(Dampening));
  }
}

struct SGD::Impl {
  Impl(GradientMap parameters, SGDOptions opts) : options(opts), params(std::move(parameters)) {
    momentum.resize(params.Count());
  }
  SGDOptions options;
  detail::ParameterSet params;
  std::vector<TensorPtr> momentum;  // FP32 host tensors, null until the first step with Momentum > 0 (PyTorch)
  std::int64_t steps = 0;
};

SGD::SGD(GradientMap parameters, SGDOptions options) {
  options.Validate();
  impl_ = std::make_unique<Impl>(std::move(parameters), options);
}

SGD::~SGD() = default;

GradientMap SGD::GetGradients() { return impl_->params.Gradients(); }

void SGD::SetGradients(const GradientMap& gradients) { impl_->params.SetGradients(gradients); }

void SGD::Step() {
  Impl& s = *impl_;
  s.params.RequireGradients("SGD");
  const std::vector<TensorPtr> gradients = s.params.Float32Gradients();
  const bool momentum = s.options.Momentum != 0.0;
  // One fused pass per step, the FP16/BF16 parameters in host memory written in it. Buffers made
  // by this step start as a copy of d (PyTorch), so they run as a "first step" call of their own.
  struct Lists {
    std::vector<TensorPtr> parameters;
    std::vector<TensorPtr> gradients;
    std::vector<TensorPtr> momentum;
    std::vector<TensorPtr> low_precision;
  };
  Lists first;
  Lists later;
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    TensorPtr& buffer = s.momentum[t];
    const bool made_now = momentum && !buffer;
    if (made_now) {
      buffer = Zeros({s.params.Size(t)});
    }
    Lists& lists = made_now ? first : later;
    lists.parameters.push_back(s.params.MasterList()[t]);
    lists.gradients.push_back(gradients[t]);
    lists.low_precision.push_back(s.params.FusedCopy(t));
    if (momentum) {
      lists.momentum.push_back(buffer);
    }
  }
  for (const bool first_step : {true, false}) {
    const Lists& lists = first_step ? first : later;
    if (!lists.parameters.empty()) {
      FusedSGDStep(OptimizerStepLists{.Parameters = lists.parameters,
                                      .Gradients = lists.gradients,
                                      .FirstState = lists.momentum,
                                      .LowPrecisionCopies = lists.low_precision},
                   SGDStepScalarsFor(s.options, first_step));
    }
  }
  s.params.WriteBackUnfused();
  ++s.steps;
}

bool SGD::Step(const DeviceScaleState& skip_if_found_inf) {
  if (skip_if_found_inf.FoundInf()) {
    return false;
  }
  Step();
  return true;
}

const GradientMap& SGD::Parameters() const noexcept { return impl_->params.Parameters(); }
const GradientMap& SGD::MasterWeights() const noexcept { return impl_->params.Masters(); }
const SGDOptions& SGD::Options() const noexcept { return impl_->options; }

void SGD::SetLearningRate(double learning_rate) {
  detail::RequirePositive(learning_rate, "learning_rate");
  impl_->options.LearningRate = learning_rate;
}

std::int64_t SGD::StepCount() const noexcept { return impl_->steps; }

std::span<const float> SGD::MomentumBuffer(const std::string& name) const {
  const TensorPtr& buffer = impl_->momentum[impl_->params.IndexOf(name, "name")];
  return buffer ? detail::Floats(*buffer) : std::span<const float>();
}

void SGD::RestoreState(const std::map<std::string, SGDParameterState>& state, std::int64_t steps) {
  Impl& s = *impl_;
  if (steps < 0) {
    throw ArgumentError("steps", "must be >= 0, got " + std::to_string(steps));
  }
  s.params.RequireSameNames(
      state.size(), [&](const std::string& name) { return state.count(name) != 0; }, "state");
  std::vector<std::vector<float>> masters;
  std::vector<std::vector<float>> momentum;
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    const SGDParameterState& entry = state.at(s.params.Name(t));
    s.params.RequireLength(entry.Master.size(), t, "master weights", "state");
    if (!entry.MomentumBuffer.empty()) {
      s.params.RequireLength(entry.MomentumBuffer.size(), t, "momentum values", "state");
    }
    masters.push_back(entry.Master);
    momentum.push_back(entry.MomentumBuffer);
  }
  std::vector<TensorPtr> buffers = MomentumTensors(momentum);
  // Everything checked: commit.
  s.params.CommitMasters(masters);
  s.momentum = std::move(buffers);
  s.steps = steps;
}

std::string SGD::StateKind() const { return "SGD"; }

std::vector<std::pair<std::string, double>> SGD::StateOptions() const {
  const SGDOptions& o = impl_->options;
  return {{"Momentum", o.Momentum},
          {"WeightDecay", o.WeightDecay},
          {"Dampening", o.Dampening},
          {"Nesterov", o.Nesterov ? 1.0 : 0.0}};
}

double SGD::StateLearningRate() const noexcept { return impl_->options.LearningRate; }

std::vector<std::string> SGD::StateVectorNames() const { return {"momentum_buffer"}; }

std::span<const float> SGD::StateVector(const std::string& name, std::size_t index) const {
  if (index != 0) throw ArgumentError("index", "SGD keeps 1 state vector (0), got " + std::to_string(index));
  return MomentumBuffer(name);
}

void SGD::ImportState(const std::map<std::string, amp::OptimizerParameterState>& state, std::int64_t steps) {
  std::map<std::string, SGDParameterState> sgd_state;
  for (const auto& [name, entry] : state) {
    if (entry.Vectors.size() != 1) {
      throw ArgumentError("state", "parameter '" + name + "' has " + std::to_string(entry.Vectors.size()) +
                                       " state vectors, SGD keeps 1 (momentum_buffer)");
    }
    sgd_state[name] = {entry.Master, entry.Vectors[0]};
  }
  RestoreState(sgd_state, steps);
}

std::vector<std::byte> SGD::StateDict() const {
  const Impl& s = *impl_;
  mlframework::detail::BlobWriter writer(kSGDKind, kSGDVersion);
  writer.F64(s.options.LearningRate);
  writer.F64(s.options.Momentum);
  writer.F64(s.options.WeightDecay);
  writer.F64(s.options.Dampening);
  writer.U8(s.options.Nesterov ? 1 : 0);
  writer.I64(s.steps);
  s.params.SaveMasters(writer);
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    writer.U8(s.momentum[t] ? 1 : 0);
    if (s.momentum[t]) {
      detail::WriteFloats(writer, detail::Floats(*s.momentum[t]));
    }
  }
  return writer.Finish();
}

void SGD::LoadStateDict(std::span<const std::byte> state) {
  Impl& s = *impl_;
  mlframework::detail::BlobReader reader(state, kSGDKind, kSGDVersion);
  SGDOptions options;
  options.LearningRate = reader.F64();
  options.Momentum = reader.F64();
  options.WeightDecay = reader.F64();
  options.Dampening = reader.F64();
  options.Nesterov = reader.Flag("Nesterov");
  detail::ValidateLoaded(options, reader);
  const std::int64_t steps = reader.Count("step count");
  std::vector<std::vector<float>> masters = s.params.ReadMasters(reader);
  std::vector<std::vector<float>> momentum(s.params.Count());
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    if (reader.Flag("momentum of \"" + s.params.Name(t) + "\"")) {
      momentum[t] = detail::ReadFloats(reader, s.params.Size(t), "momentum of \"" + s.params.Name(t) + "\"");
    }
  }
  reader.ExpectEnd();
  std::vector<TensorPtr> buffers = MomentumTensors(momentum);
  // Everything decoded: commit.
  s.params.CommitMasters(masters);
  s.momentum = std::move(buffers);
  s.options = options;
  s.steps = steps;
}

}  // namespace mlframework::optimizers
