#include <mlframework/optimizers/SGD.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/optimizers/ParameterSet.hpp"
#include "mlframework/optimizers/StateList.hpp"

namespace mlframework::optimizers {

namespace {

constexpr char kSGDKind[] = "optimizers.SGD";
// 4: the momentum format, block size, rounding seed and master format, each buffer as stored;
// 3: the same, a Float16 buffer without scales (read: converted to the scaled format);
// 2: the options as doubles, with Dampening, FP32 masters and buffers.
constexpr std::uint16_t kSGDVersion = 4;
constexpr std::uint16_t kSGDUnscaledFloat16Version = 3;
constexpr std::uint16_t kSGDFloat32Version = 2;

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
  detail::CheckStateOption(MomentumFormat, false, "MomentumFormat");
  detail::CheckBlockSize(StateBlockSize, "StateBlockSize");
  detail::CheckMasterOption(Masters, "Masters");
}

struct SGD::Impl {
  Impl(GradientMap parameters, SGDOptions opts)
      : options(opts),
        params(std::move(parameters), opts.Masters),
        momentum(opts.MomentumFormat, opts.StateBlockSize, false, params.Count()) {}
  // RestoreState() (@p conversion Convert: FP32 buffers encoded) and ImportStoredState() (None).
  void Import(const std::map<std::string, amp::OptimizerStoredParameterState>& state, std::int64_t new_steps,
              amp::StateConversion conversion) {
    const std::vector<std::vector<float>> masters = params.CheckedMasters(state, new_steps, 1, "SGD");
    std::vector<detail::StateRecord> buffers;
    for (std::size_t t = 0; t < params.Count(); ++t) {
      buffers.push_back(momentum.Prepare(detail::ToRecord(state.at(params.Name(t)).Vectors[0]), params.Size(t),
                                         conversion, "momentum values of \"" + params.Name(t) + "\""));
    }
    // Everything checked: commit.
    params.CommitMasters(masters);
    momentum.Commit(buffers);
    steps = new_steps;
  }
  SGDOptions options;
  detail::ParameterSet params;
  detail::StateList momentum;  // not made until the first step with Momentum > 0 (PyTorch)
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
    std::vector<TensorPtr> scales;
    std::vector<TensorPtr> low_precision;
    std::vector<TensorPtr> remainders;
    std::vector<std::uint64_t> offsets;
  };
  std::vector<std::size_t> made_now;
  std::vector<std::size_t> sizes;
  for (std::size_t t = 0; t < s.params.Count() && momentum; ++t) {
    if (!s.momentum.Has(t)) {
      made_now.push_back(t);
      sizes.push_back(s.params.Size(t));
    }
  }
  s.momentum.Make(made_now, sizes);
  const std::vector<TensorPtr> low_precision = s.params.FusedCopies();
  const bool scaled = IsBlockScaled(s.options.MomentumFormat);
  Lists first;
  Lists later;
  for (std::size_t t = 0, k = 0; t < s.params.Count(); ++t) {
    const bool made = k < made_now.size() && made_now[k] == t;
    k += made ? 1 : 0;
    Lists& lists = made ? first : later;
    lists.parameters.push_back(s.params.MasterList()[t]);
    lists.gradients.push_back(gradients[t]);
    if (!low_precision.empty()) lists.low_precision.push_back(low_precision[t]);
    if (!s.params.Remainders().empty()) lists.remainders.push_back(s.params.Remainders()[t]);
    lists.offsets.push_back(s.params.ElementOffset(t));
    if (momentum) {
      lists.momentum.push_back(s.momentum.Data(t));
      if (scaled) lists.scales.push_back(s.momentum.Scales(t));
    }
  }
  const SGDOptions& o = s.options;
  for (const bool first_step : {true, false}) {
    const Lists& lists = first_step ? first : later;
    if (!lists.parameters.empty()) {
      FusedSGDStep(OptimizerStepLists{.Parameters = lists.parameters,
                                      .Gradients = lists.gradients,
                                      .FirstState = lists.momentum,
                                      .LowPrecisionCopies = lists.low_precision,
                                      .FirstStateFormat = momentum ? o.MomentumFormat : StateFormat::Float32,
                                      .FirstStateScales = lists.scales,
                                      .StateBlockSize = o.StateBlockSize,
                                      .Masters = o.Masters,
                                      .ParameterRemainders = lists.remainders,
                                      .RoundingSeed = o.RoundingSeed,
                                      .RoundingStep = static_cast<std::uint64_t>(s.steps + 1),
                                      .ElementOffsets = lists.offsets},
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
  return impl_->momentum.Values(impl_->params.IndexOf(name, "name"));
}

void SGD::RestoreState(const std::map<std::string, SGDParameterState>& state, std::int64_t steps) {
  std::map<std::string, amp::OptimizerStoredParameterState> stored;
  for (const auto& [name, entry] : state) {
    stored[name] = {entry.Master, {detail::Float32Values(entry.MomentumBuffer)}};
  }
  impl_->Import(stored, steps, amp::StateConversion::Convert);
}

void SGD::ImportStoredState(const std::map<std::string, amp::OptimizerStoredParameterState>& state,
                            std::int64_t steps) {
  impl_->Import(state, steps, amp::StateConversion::None);
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

amp::StoredStateVector SGD::StoredState(const std::string& name, std::size_t index) const {
  if (index != 0) throw ArgumentError("index", "SGD keeps 1 state vector (0), got " + std::to_string(index));
  return impl_->momentum.Stored(impl_->params.IndexOf(name, "name"));
}

MasterFormat SGD::StateMasterFormat() const noexcept { return impl_->options.Masters; }

std::vector<float> SGD::StateMasterValues(const std::string& name) const {
  return impl_->params.MasterValues(impl_->params.IndexOf(name, "name"));
}

void SGD::SetElementOffsets(const std::map<std::string, std::uint64_t>& offsets) {
  impl_->params.SetElementOffsets(offsets);
}

std::uint64_t SGD::StateRoundingSeed() const noexcept { return impl_->options.RoundingSeed; }

void SGD::SetRoundingSeed(std::uint64_t seed) noexcept { impl_->options.RoundingSeed = seed; }

void SGD::ImportState(const std::map<std::string, amp::OptimizerParameterState>& state, std::int64_t steps) {
  impl_->Import(detail::StoredForm(state), steps, amp::StateConversion::Convert);
}

std::vector<std::byte> SGD::StateDict() const {
  const Impl& s = *impl_;
  mlframework::detail::BlobWriter writer(kSGDKind, kSGDVersion);
  writer.F64(s.options.LearningRate);
  writer.F64(s.options.Momentum);
  writer.F64(s.options.WeightDecay);
  writer.F64(s.options.Dampening);
  writer.U8(s.options.Nesterov ? 1 : 0);
  writer.U64(s.options.RoundingSeed);
  writer.I64(s.steps);
  s.params.SaveMasters(writer);
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    detail::WriteStateRecord(writer, s.momentum.Stored(t), s.momentum.Has(t));
  }
  return writer.Finish();
}

void SGD::LoadStateDict(std::span<const std::byte> state, amp::StateConversion conversion) {
  Impl& s = *impl_;
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader = mlframework::detail::OpenBlobVersion(
      state, kSGDKind, {kSGDVersion, kSGDUnscaledFloat16Version, kSGDFloat32Version}, version);
  const bool float32_blob = version == kSGDFloat32Version;
  const detail::BlobStates states = float32_blob                            ? detail::BlobStates::Float32
                                    : version == kSGDUnscaledFloat16Version ? detail::BlobStates::UnscaledFloat16
                                                                            : detail::BlobStates::Records;
  SGDOptions options = s.options;  // the formats stay this optimizer's
  options.LearningRate = reader.F64();
  options.Momentum = reader.F64();
  options.WeightDecay = reader.F64();
  options.Dampening = reader.F64();
  options.Nesterov = reader.Flag("Nesterov");
  if (!float32_blob) options.RoundingSeed = reader.U64();
  detail::ValidateLoaded(options, reader);
  const std::int64_t steps = reader.Count("step count");
  std::vector<std::vector<float>> masters =
      s.params.ReadMasters(reader, !float32_blob, conversion == amp::StateConversion::Convert);
  std::vector<detail::StateRecord> momentum;
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    const std::size_t size = s.params.Size(t);
    const std::string what = "momentum of \"" + s.params.Name(t) + "\"";
    detail::StateRecord record;
    // A blob of FP32 state flags each buffer; ReadStateRecord() reads the flag itself.
    if (!float32_blob || reader.Flag(what)) {
      record = detail::ReadState(reader, states, size, what);
    }
    momentum.push_back(s.momentum.Prepare(record, size, conversion, what));
  }
  reader.ExpectEnd();
  // Everything decoded: commit.
  s.params.CommitMasters(masters);
  s.momentum.Commit(momentum);
  s.options = options;
  s.steps = steps;
}

}  // namespace mlframework::optimizers
