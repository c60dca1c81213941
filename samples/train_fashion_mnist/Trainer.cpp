#include "Trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/mlframework.hpp>

#include "Fp8Codec.hpp"

namespace fashion_mnist {

namespace {

// Process CPU time (all threads): on a shared machine wall time mostly measures the neighbours.
struct CpuClock {
  // Named like std::chrono clocks (Clock::now()), so either can be plugged in.
  static double now() {  // NOLINT(readability-identifier-naming)
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
};
using Clock = CpuClock;
using mlframework::DataType;
namespace amp = mlframework::amp;
namespace mp = mlframework::optimizers::mixed_precision;

double Seconds(double from, double to) { return to - from; }

struct ModeSpec {
  Mode mode;
  std::string_view name;
  std::string_view description;
  DataType storage;
};

constexpr std::array<ModeSpec, 6> kModes = {{
    {Mode::kFp32, "fp32", "FP32 everywhere (reference)", DataType::Float32},
    {Mode::kFp16, "fp16", "FP16, no loss scaling", DataType::Float16},
    {Mode::kFp16Scaler, "fp16-scaler", "FP16, GradScalerContext, dynamic scale", DataType::Float16},
    {Mode::kFp16Conversion, "fp16-layer", "FP16, GradientConversionLayer, clipping", DataType::Float16},
    {Mode::kBf16, "bf16", "BF16, no loss scaling", DataType::BFloat16},
    {Mode::kFp8, "fp8", "FP8 E4M3/E5M2, DelayedScaling", DataType::Float8E4M3FN},
}};

const ModeSpec& Spec(Mode mode) {
  for (const ModeSpec& spec : kModes) {
    if (spec.mode == mode) {
      return spec;
    }
  }
  return kModes.front();
}

// Forwards to the real optimizer and times Step(), so the time GradScalerContext::Step
// spends in the optimizer can be told apart from the time it spends scaling.
class TimedOptimizer final : public amp::IOptimizer {
 public:
  explicit TimedOptimizer(amp::IOptimizer& inner) : inner_(inner) {}
  mlframework::GradientMap GetGradients() override { return inner_.GetGradients(); }
  void SetGradients(const mlframework::GradientMap& gradients) override { inner_.SetGradients(gradients); }
  void Step() override {
    const auto start = Clock::now();
    inner_.Step();
    step_seconds_ += Seconds(start, Clock::now());
  }
  // Seconds spent in Step() since the last call.
  double TakeStepSeconds() { return std::exchange(step_seconds_, 0.0); }

 private:
  amp::IOptimizer& inner_;
  double step_seconds_ = 0.0;
};

std::unique_ptr<amp::IOptimizer> MakeOptimizer(const TrainConfig& config, const mlframework::GradientMap& parameters) {
  if (config.optimizer == "sgd") {
    if (!IsBaseline(config.states)) {
      throw mlframework::ArgumentError(
          "optimizer", "is sgd; the optimizer-state rows (" + std::string(config.states.name) + ") need adam");
    }
    return std::make_unique<mlframework::optimizers::SGD>(
        parameters, mlframework::optimizers::SGDOptions{.LearningRate = config.learning_rate, .Momentum = 0.9f});
  }
  if (config.optimizer == "adam") {
    return std::make_unique<mlframework::optimizers::Adam>(
        parameters, mlframework::optimizers::AdamOptions{.LearningRate = config.learning_rate,
                                                         .FirstMomentFormat = config.states.first,
                                                         .SecondMomentFormat = config.states.second,
                                                         .Masters = config.states.masters,
                                                         .RoundingSeed = config.seed});
  }
  throw mlframework::ArgumentError("optimizer", "is \"" + config.optimizer + "\", expected adam or sgd");
}

void PrintProgress(const TrainConfig& config, Mode mode, int epoch, std::size_t step, std::size_t steps, double loss,
                   float scale, bool done) {
  if (!config.progress) {
    return;
  }
  static const bool kTty = isatty(STDERR_FILENO) != 0;
  // On a terminal the line updates in place; in a log, one line per epoch.
  if (!kTty && !done) {
    return;
  }
  std::fprintf(stderr, "%s  %-12s epoch %d/%d  step %5zu/%zu  loss %8.4f  scale %-9.0f%s", kTty ? "\r" : "",
               std::string(ModeName(mode)).c_str(), epoch + 1, config.epochs, step, steps, loss,
               static_cast<double>(scale), done ? "\n" : "");
  std::fflush(stderr);
}

float ReadScalar(const mlframework::TensorPtr& tensor) {
  return *static_cast<const float*>(mlframework::backends::cpu::Data(*tensor));
}

}  // namespace

std::string_view ModeName(Mode mode) { return Spec(mode).name; }
std::string_view ModeDescription(Mode mode) { return Spec(mode).description; }
DataType ModeStorage(Mode mode) { return Spec(mode).storage; }

std::optional<Mode> ParseMode(std::string_view name) {
  for (const ModeSpec& spec : kModes) {
    if (spec.name == name) {
      return spec.mode;
    }
  }
  return std::nullopt;
}

std::vector<Mode> AllModes() {
  std::vector<Mode> modes;
  modes.reserve(kModes.size());
  for (const ModeSpec& spec : kModes) {
    modes.push_back(spec.mode);
  }
  return modes;
}

std::size_t TrainingExamples(const Split& train, const TrainConfig& config) {
  const std::size_t examples = config.subset == 0 ? train.count : std::min(config.subset, train.count);
  if (config.batch_size == 0 || config.batch_size > examples) {
    throw mlframework::ArgumentError("batch_size", "is " + std::to_string(config.batch_size) + ", expected 1 to the " +
                                                       std::to_string(examples) + " training examples");
  }
  return examples;
}

std::vector<std::size_t> EpochOrder(std::size_t examples, std::uint64_t seed, int epoch) {
  std::vector<std::size_t> order(examples);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + static_cast<std::uint64_t>(epoch)));
  return order;
}

void FillBatch(const Split& split, std::span<const std::size_t> indices, std::span<float> inputs,
               std::span<std::uint8_t> labels) {
  for (std::size_t b = 0; b < indices.size(); ++b) {
    const std::size_t index = indices[b];
    std::copy_n(split.images.begin() + static_cast<std::ptrdiff_t>(index * split.features), split.features,
                inputs.begin() + static_cast<std::ptrdiff_t>(b * split.features));
    labels[b] = split.labels[index];
  }
}

double Evaluate(Mlp& model, const Split& test) {
  constexpr std::size_t kEvalBatch = 1000;
  std::size_t correct = 0;
  for (std::size_t first = 0; first < test.count; first += kEvalBatch) {
    const std::size_t batch = std::min(kEvalBatch, test.count - first);
    const std::span<const float> inputs(test.images.data() + first * test.features, batch * test.features);
    const std::span<const std::uint8_t> labels(test.labels.data() + first, batch);
    correct += model.Forward(inputs, labels, batch).correct;
  }
  return test.count == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(test.count);
}

ModeResult TrainMode(const Dataset& data, const TrainConfig& config, Mode mode) {
  const Split& train = data.train;
  const std::size_t examples = TrainingExamples(train, config);
  std::vector<std::size_t> sizes = {train.features};
  sizes.insert(sizes.end(), config.hidden.begin(), config.hidden.end());
  sizes.push_back(kClasses);
  // FP8 mode: an FP32 network whose weights, activations and gradients go through FP8 storage.
  Mlp model(sizes, mode == Mode::kFp8 ? DataType::Float32 : ModeStorage(mode), config.seed, config.init_gain);
  std::optional<mlframework::fp8::DelayedScaling> recipe;
  std::optional<Fp8Codec> codec;
  if (mode == Mode::kFp8) {
    recipe.emplace(mlframework::fp8::DelayedScalingConfig{
        .Margin = config.fp8_margin,
        .Fp8Format = mlframework::fp8::Format::HYBRID,
        .AmaxHistoryLen = config.fp8_history_len,
        .AmaxComputeAlgo = mlframework::fp8::ParseAmaxComputeAlgo(config.fp8_amax_algo)});
    codec.emplace(*recipe);
    model.UseFp8(&*codec);
  }
  const std::unique_ptr<amp::IOptimizer> optimizer = MakeOptimizer(config, model.Parameters());
  TimedOptimizer timed(*optimizer);

  // The scalers of the two scaling modes, configured alike so they can be compared.
  std::optional<amp::GradScaler> scaler;
  std::optional<mp::GradientConversionLayer> layer;
  if (mode == Mode::kFp16Scaler) {
    scaler.emplace(amp::GradScalerFactory::CreateFromConfig(
        amp::DynamicScalerConfig{.InitialScale = config.initial_scale, .GrowthInterval = config.growth_interval}));
  }
  if (mode == Mode::kFp16Conversion) {
    mp::MixedPrecisionOptions options = mp::MixedPrecisionOptions::ForFP16();
    options.InitialLossScale = config.initial_scale;
    options.GrowthInterval = config.growth_interval;
    options.EnableGradientClipping = true;
    options.MaxGradNorm = config.max_grad_norm;
    layer.emplace(options);
  }
  // The library's observers report what the scaler decided: which gradients overflowed (one
  // summary line per burst) and, with --csv, a row per step.
  std::vector<std::shared_ptr<mlframework::ITrainingObserver>> observers;
  std::shared_ptr<mlframework::OverflowLogger> logger;
  std::ofstream steps_csv;
  if (scaler || layer) {
    const std::string name(ModeName(mode));
    if (config.log_overflows) {
      logger = std::make_shared<mlframework::OverflowLogger>([name](std::string_view line) {
        static const bool kTty = isatty(STDERR_FILENO) != 0;
        std::fprintf(stderr, "%s  %-12s %.*s\n", kTty ? "\r\033[K" : "", name.c_str(), static_cast<int>(line.size()),
                     line.data());
      });
      observers.push_back(logger);
    }
    if (!config.steps_csv_dir.empty()) {
      const std::string path = config.steps_csv_dir + "/" + name + "-steps.csv";
      steps_csv.open(path);
      if (!steps_csv) {
        throw std::runtime_error("cannot write " + path);
      }
      observers.push_back(std::make_shared<mlframework::TrainingCsvWriter>(steps_csv));
    }
  }
  for (const auto& observer : observers) {
    if (scaler) scaler->AddObserver(observer);
    if (layer) layer->AddObserver(observer);
  }

  ModeResult result;
  result.mode = mode;
  const std::size_t steps_per_epoch = examples / config.batch_size;  // drop the last partial batch
  std::vector<float> inputs(config.batch_size * train.features);
  std::vector<std::uint8_t> labels(config.batch_size);
  const float reduction_factor =
      config.reduction == Reduction::kMean ? 1.0f / static_cast<float>(config.batch_size) : 1.0f;

  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    // Same batches in the same order for every mode.
    const std::vector<std::size_t> order = EpochOrder(examples, config.seed, epoch);
    double epoch_loss = 0.0;
    for (std::size_t s = 0; s < steps_per_epoch; ++s) {
      FillBatch(train, std::span(order).subspan(s * config.batch_size, config.batch_size), inputs, labels);
      const auto step_start = Clock::now();
      const auto fp8_before = codec ? codec->Seconds() : 0.0;
      const BatchLoss forward = model.Forward(inputs, labels, config.batch_size);
      // The loss as the framework holds it: an FP32 scalar tensor.
      const float reduced = static_cast<float>(forward.mean_loss) * config.loss_weight *
                            (config.reduction == Reduction::kMean ? 1.0f : static_cast<float>(config.batch_size));
      const mlframework::TensorPtr loss = mlframework::Scalar(reduced);
      const float seed = config.loss_weight * reduction_factor;
      StepRecord record{.step = result.steps + 1, .loss = forward.mean_loss};
      double scaling_seconds = 0.0;

      if (mode == Mode::kFp16Scaler) {
        auto t = Clock::now();
        amp::GradScalerContext context(*scaler, loss);
        record.scale = scaler->CurrentScale();
        scaling_seconds += Seconds(t, Clock::now());
        // Backward of the scaled loss: every gradient carries the scale.
        model.Backward(record.scale * seed, result.underflow);
        optimizer->SetGradients(model.Gradients());
        t = Clock::now();
        const bool stepped = context.Step(timed);
        scaling_seconds += Seconds(t, Clock::now()) - timed.TakeStepSeconds();
        record.skipped = !stepped;
      } else if (mode == Mode::kFp16Conversion) {
        auto t = Clock::now();
        // A framework runs backward on `scaled`; this MLP's backward takes the factor directly.
        const mlframework::TensorPtr scaled = layer->ScaleLoss(loss);
        record.scale = layer->CurrentScale();
        scaling_seconds += Seconds(t, Clock::now());
        model.Backward(record.scale * seed, result.underflow);
        t = Clock::now();
        const mp::GradientProcessingResult processed = layer->ProcessGradients(model.Gradients());
        scaling_seconds += Seconds(t, Clock::now());
        record.skipped = processed.ShouldSkip;
        if (!processed.ShouldSkip) {
          optimizer->SetGradients(processed.Gradients);
          optimizer->Step();
        }
      } else {
        model.Backward(seed, result.underflow);
        optimizer->SetGradients(model.Gradients());
        optimizer->Step();
      }
      if (recipe) {
        // The step's amax, then the scales the next step casts with (Transformer Engine updates
        // after the step).
        const std::vector<std::string> names = recipe->Names();
        const std::size_t first = result.fp8.size();
        for (const std::string& name : names) {
          result.fp8.push_back({.step = result.steps + 1, .tensor = name, .amax = ReadScalar(recipe->Amax(name))});
        }
        const auto t = Clock::now();
        recipe->UpdateScales();
        scaling_seconds += Seconds(t, Clock::now()) + codec->Seconds() - fp8_before;
        for (std::size_t i = 0; i < names.size(); ++i) {
          result.fp8[first + i].scale = ReadScalar(recipe->Scale(names[i]));
        }
      }
      if (!record.skipped) {
        model.RefreshWeights();
      }
      const auto step_end = Clock::now();
      result.total_seconds += Seconds(step_start, step_end);
      result.scaling_seconds += scaling_seconds;
      result.skipped += record.skipped ? 1 : 0;
      result.steps += 1;
      epoch_loss += forward.mean_loss;
      result.records.push_back(record);
      if ((s + 1) % 20 == 0 || s + 1 == steps_per_epoch) {
        PrintProgress(config, mode, epoch, s + 1, steps_per_epoch, forward.mean_loss, record.scale,
                      s + 1 == steps_per_epoch);
      }
    }
    result.final_loss = epoch_loss / static_cast<double>(std::max<std::size_t>(steps_per_epoch, 1));
  }
  if (logger) {
    logger->Flush();  // a burst still open at the end of training
  }
  if (scaler) {
    result.final_scale = scaler->CurrentScale();
  } else if (layer) {
    result.final_scale = layer->CurrentScale();
    result.clip_count = layer->ClipCount();
  }
  result.seconds_per_step = result.steps == 0 ? 0.0 : result.total_seconds / static_cast<double>(result.steps);
  result.test_accuracy = Evaluate(model, data.test);
  result.states = config.states;
  result.state_bytes = MeasureStateBytes(*optimizer);
  return result;
}

}  // namespace fashion_mnist
