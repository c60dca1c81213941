#include <mlframework/optimizers/Adam.hpp>

#include <map>
#include <span>
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

constexpr char kAdamKind[] = "optimizers.Adam";
// 4: the state formats, block size, rounding seed and master format, each moment as stored;
// 3: the same, a Float16 moment without scales (read: converted to the scaled format);
// 2: the options as doubles, FP32 masters and moments.
constexpr std::uint16_t kAdamVersion = 4;
constexpr std::uint16_t kAdamUnscaledFloat16Version = 3;
constexpr std::uint16_t kAdamFloat32Version = 2;

}  // namespace

void AdamOptions::Validate() const {
  detail::RequirePositive(LearningRate, "LearningRate");
  detail::RequireFraction(Beta1, "Beta1");
  detail::RequireFraction(Beta2, "Beta2");
  detail::RequirePositive(Epsilon, "Epsilon");
  detail::RequireNonNegative(WeightDecay, "WeightDecay");
  detail::CheckStateOption(FirstMomentFormat, false, "FirstMomentFormat");
  detail::CheckStateOption(SecondMomentFormat, true, "SecondMomentFormat");
  detail::CheckBlockSize(StateBlockSize, "StateBlockSize");
  detail::CheckMasterOption(Masters, "Masters");
}

struct Adam::Impl {
  Impl(GradientMap parameters, AdamOptions opts)
      : options(opts),
        params(std::move(parameters), opts.Masters),
        exp_avg(opts.FirstMomentFormat, opts.StateBlockSize, false, params.Count()),
        exp_avg_sq(opts.SecondMomentFormat, opts.StateBlockSize, true, params.Count()) {
    std::vector<std::size_t> indices;
    std::vector<std::size_t> sizes;
    for (std::size_t t = 0; t < params.Count(); ++t) {
      indices.push_back(t);
      sizes.push_back(params.Size(t));
    }
    exp_avg.Make(indices, sizes);
    exp_avg_sq.Make(indices, sizes);
    const std::span<const TensorPtr> remainder_list = params.Remainders();
    for (std::size_t t = 0; t < remainder_list.size(); ++t) {
      remainders.emplace(params.Name(t), remainder_list[t]);
    }
  }
  // RestoreState() (@p conversion Convert: FP32 vectors encoded) and ImportStoredState() (None).
  void Import(const std::map<std::string, amp::OptimizerStoredParameterState>& state, std::int64_t new_steps,
              amp::StateConversion conversion) {
    const std::vector<std::vector<float>> masters = params.CheckedMasters(state, new_steps, 2, "Adam");
    std::vector<detail::StateRecord> first;
    std::vector<detail::StateRecord> second;
    for (std::size_t t = 0; t < params.Count(); ++t) {
      const std::vector<amp::StoredStateValues>& vectors = state.at(params.Name(t)).Vectors;
      const std::string name = " of \"" + params.Name(t) + "\"";
      first.push_back(
          exp_avg.Prepare(detail::ToRecord(vectors[0]), params.Size(t), conversion, "first moments" + name));
      second.push_back(
          exp_avg_sq.Prepare(detail::ToRecord(vectors[1]), params.Size(t), conversion, "second moments" + name));
      if (!first.back().present || !second.back().present) {
        throw ArgumentError("state", "has no moments" + name + ": Adam keeps both for every parameter");
      }
    }
    // Everything checked: commit.
    params.CommitMasters(masters);
    exp_avg.Commit(first);
    exp_avg_sq.Commit(second);
    steps = new_steps;
  }
  AdamOptions options;
  detail::ParameterSet params;
  detail::StateList exp_avg;     // first moments
  detail::StateList exp_avg_sq;  // second moments
  GradientMap remainders;        // params.Remainders() by name (BFloat16Remainder masters)
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
  const std::vector<TensorPtr> low_precision = s.params.FusedCopies();
  const std::int64_t step = s.steps + 1;
  // One fused pass: masters, gradients and moments read once, masters and moments written once,
  // and FP16/BF16 parameters in host memory rounded from the updated masters in the same pass.
  const AdamOptions& o = s.options;
  FusedAdamStep(OptimizerStepLists{.Parameters = s.params.MasterList(),
                                   .Gradients = gradients,
                                   .FirstState = s.exp_avg.Data(),
                                   .SecondState = s.exp_avg_sq.Data(),
                                   .LowPrecisionCopies = low_precision,
                                   .FirstStateFormat = o.FirstMomentFormat,
                                   .SecondStateFormat = o.SecondMomentFormat,
                                   .FirstStateScales = s.exp_avg.ScaleList(),
                                   .SecondStateScales = s.exp_avg_sq.ScaleList(),
                                   .StateBlockSize = o.StateBlockSize,
                                   .Masters = o.Masters,
                                   .ParameterRemainders = s.params.Remainders(),
                                   .RoundingSeed = o.RoundingSeed,
                                   .RoundingStep = static_cast<std::uint64_t>(step),
                                   .ElementOffsets = s.params.ElementOffsets()},
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
const GradientMap& Adam::MasterRemainders() const noexcept { return impl_->remainders; }
const AdamOptions& Adam::Options() const noexcept { return impl_->options; }

void Adam::SetLearningRate(double learning_rate) {
  detail::RequirePositive(learning_rate, "learning_rate");
  impl_->options.LearningRate = learning_rate;
}

std::int64_t Adam::StepCount() const noexcept { return impl_->steps; }

std::span<const float> Adam::FirstMoments(const std::string& name) const {
  return impl_->exp_avg.Values(impl_->params.IndexOf(name, "name"));
}

std::span<const float> Adam::SecondMoments(const std::string& name) const {
  return impl_->exp_avg_sq.Values(impl_->params.IndexOf(name, "name"));
}

void Adam::RestoreState(const std::map<std::string, AdamParameterState>& state, std::int64_t steps) {
  std::map<std::string, amp::OptimizerStoredParameterState> stored;
  for (const auto& [name, entry] : state) {
    stored[name] = {entry.Master,
                    {detail::Float32Values(entry.FirstMoments), detail::Float32Values(entry.SecondMoments)}};
  }
  impl_->Import(stored, steps, amp::StateConversion::Convert);
}

void Adam::ImportStoredState(const std::map<std::string, amp::OptimizerStoredParameterState>& state,
                             std::int64_t steps) {
  impl_->Import(state, steps, amp::StateConversion::None);
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

amp::StoredStateVector Adam::StoredState(const std::string& name, std::size_t index) const {
  if (index > 1) throw ArgumentError("index", "Adam keeps 2 state vectors (0, 1), got " + std::to_string(index));
  const std::size_t t = impl_->params.IndexOf(name, "name");
  return index == 0 ? impl_->exp_avg.Stored(t) : impl_->exp_avg_sq.Stored(t);
}

MasterFormat Adam::StateMasterFormat() const noexcept { return impl_->options.Masters; }

std::vector<float> Adam::StateMasterValues(const std::string& name) const {
  return impl_->params.MasterValues(impl_->params.IndexOf(name, "name"));
}

void Adam::SetElementOffsets(const std::map<std::string, std::uint64_t>& offsets) {
  impl_->params.SetElementOffsets(offsets);
}

std::uint64_t Adam::StateRoundingSeed() const noexcept { return impl_->options.RoundingSeed; }

void Adam::SetRoundingSeed(std::uint64_t seed) noexcept { impl_->options.RoundingSeed = seed; }

void Adam::ImportState(const std::map<std::string, amp::OptimizerParameterState>& state, std::int64_t steps) {
  impl_->Import(detail::StoredForm(state), steps, amp::StateConversion::Convert);
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
  writer.U64(s.options.RoundingSeed);
  writer.I64(s.steps);
  s.params.SaveMasters(writer);
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    detail::WriteStateRecord(writer, s.exp_avg.Stored(t), true);
    detail::WriteStateRecord(writer, s.exp_avg_sq.Stored(t), true);
  }
  return writer.Finish();
}

void Adam::LoadStateDict(std::span<const std::byte> state, amp::StateConversion conversion) {
  Impl& s = *impl_;
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader = mlframework::detail::OpenBlobVersion(
      state, kAdamKind, {kAdamVersion, kAdamUnscaledFloat16Version, kAdamFloat32Version}, version);
  const bool float32_blob = version == kAdamFloat32Version;
  const detail::BlobStates states = float32_blob                             ? detail::BlobStates::Float32
                                    : version == kAdamUnscaledFloat16Version ? detail::BlobStates::UnscaledFloat16
                                                                             : detail::BlobStates::Records;
  AdamOptions options = s.options;  // the formats stay this optimizer's
  options.LearningRate = reader.F64();
  options.Beta1 = reader.F64();
  options.Beta2 = reader.F64();
  options.Epsilon = reader.F64();
  options.WeightDecay = reader.F64();
  options.DecoupledWeightDecay = reader.Flag("DecoupledWeightDecay");
  if (!float32_blob) options.RoundingSeed = reader.U64();
  detail::ValidateLoaded(options, reader);
  const std::int64_t steps = reader.Count("step count");
  std::vector<std::vector<float>> masters =
      s.params.ReadMasters(reader, !float32_blob, conversion == amp::StateConversion::Convert);
  std::vector<detail::StateRecord> exp_avg;
  std::vector<detail::StateRecord> exp_avg_sq;
  for (std::size_t t = 0; t < s.params.Count(); ++t) {
    const std::size_t size = s.params.Size(t);
    const std::string first = "first moments of \"" + s.params.Name(t) + "\"";
    const std::string second = "second moments of \"" + s.params.Name(t) + "\"";
    exp_avg.push_back(s.exp_avg.Prepare(detail::ReadState(reader, states, size, first), size, conversion, first));
    exp_avg_sq.push_back(
        s.exp_avg_sq.Prepare(detail::ReadState(reader, states, size, second), size, conversion, second));
    if (!exp_avg.back().present || !exp_avg_sq.back().present) {
      std::string missing = "has no ";
      missing += first;
      missing += " or ";
      missing += second;
      reader.Fail(missing);
    }
  }
  reader.ExpectEnd();
  // Everything decoded: commit.
  s.params.CommitMasters(masters);
  s.exp_avg.Commit(exp_avg);
  s.exp_avg_sq.Commit(exp_avg_sq);
  s.options = options;
  s.steps = steps;
}

}  // namespace mlframework::optimizers
