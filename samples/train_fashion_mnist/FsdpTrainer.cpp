#include "FsdpTrainer.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "Mlp.hpp"

namespace fashion_mnist {

namespace {

using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::TensorPtr;
namespace fsdp = mlframework::distributed::fsdp;

constexpr std::array<WireSpec, 3> kWires = {{
    {"fp32", "FP32 reduce-scatter (baseline)", DataType::Float32, fsdp::GradientWire::ReduceDType},
    {"bf16", "BF16 reduce-scatter, FP32 sums", DataType::BFloat16, fsdp::GradientWire::ReduceDType},
    {"fp8", "FP8 E4M3 blocks of 256, FP32 scales", DataType::Float32, fsdp::GradientWire::Float8Blocks},
}};

std::string LayerName(std::size_t layer) { return "layer" + std::to_string(layer); }

// Layer @p layer's weight and bias out of the model's map ("layerK.weight"), named as the unit's.
GradientMap LayerTensors(const GradientMap& model, std::size_t layer) {
  const std::string prefix = LayerName(layer) + ".";
  return {{"weight", model.at(prefix + "weight")}, {"bias", model.at(prefix + "bias")}};
}

// Gathers every unit and copies its weights into @p model, where forward reads them.
void LoadWeights(fsdp::FSDP& sharded, Mlp& model) {
  for (std::size_t layer = 0; layer < sharded.UnitCount(); ++layer) {
    fsdp::FSDPShardingUnit& unit = sharded.Unit(layer);
    unit.Gather();
    const GradientMap into = LayerTensors(model.Parameters(), layer);
    const std::array<TensorPtr, 2> src = {unit.Parameters().at("weight"), unit.Parameters().at("bias")};
    const std::array<TensorPtr, 2> dst = {into.at("weight"), into.at("bias")};
    mlframework::CastInto(src, dst);
    unit.Release();
  }
  model.RefreshWeights();
}

}  // namespace

std::vector<WireSpec> AllWires() { return {kWires.begin(), kWires.end()}; }

std::optional<WireSpec> ParseWire(std::string_view name) {
  for (const WireSpec& wire : kWires) {
    if (wire.name == name) {
      return wire;
    }
  }
  return std::nullopt;
}

WireResult TrainFsdp(const Dataset& data, const TrainConfig& config, const WireSpec& wire,
                     const std::shared_ptr<mlframework::distributed::IProcessGroup>& world) {
  const Split& train = data.train;
  const std::size_t examples = TrainingExamples(train, config);
  const auto ranks = static_cast<std::size_t>(world->WorldSize());
  const auto rank = static_cast<std::size_t>(world->Rank());
  if (config.batch_size % ranks != 0) {
    throw mlframework::ArgumentError(
        "batch_size",
        "is " + std::to_string(config.batch_size) + ", expected a multiple of the " + std::to_string(ranks) + " ranks");
  }
  if (config.optimizer != "adam" || !IsBaseline(config.states)) {
    throw mlframework::ArgumentError("optimizer", "is " + config.optimizer + " with " +
                                                      std::string(config.states.name) +
                                                      " states; the FSDP demo runs Adam with FP32 states");
  }
  std::vector<std::size_t> sizes = {train.features};
  sizes.insert(sizes.end(), config.hidden.begin(), config.hidden.end());
  sizes.push_back(kClasses);
  // Every rank initializes the same FP32 network; FSDP keeps each rank's shard of it.
  Mlp model(sizes, DataType::Float32, config.seed, config.init_gain);
  const auto counting = std::make_shared<CountingProcessGroup>(world);
  fsdp::FSDP sharded(counting, {.Strategy = fsdp::ShardingStrategy::FullShard,
                                .ParamDType = DataType::Float32,
                                .ReduceDType = wire.reduce_dtype,
                                .Wire = wire.wire});
  const std::size_t layers = sizes.size() - 1;
  for (std::size_t layer = 0; layer < layers; ++layer) {
    sharded.RegisterUnit(LayerName(layer), LayerTensors(model.Parameters(), layer));
  }
  mlframework::optimizers::Adam adam(sharded.ShardedParameters(), {.LearningRate = config.learning_rate});

  WireResult result;
  result.wire = wire;
  const std::size_t per_rank = config.batch_size / ranks;
  const std::size_t steps_per_epoch = examples / config.batch_size;
  std::vector<float> inputs(per_rank * train.features);
  std::vector<std::uint8_t> labels(per_rank);
  UnderflowCount unused;
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    const std::vector<std::size_t> order = EpochOrder(examples, config.seed, epoch);
    double epoch_loss = 0.0;
    for (std::size_t s = 0; s < steps_per_epoch; ++s) {
      // This rank's slice of the step's global batch.
      FillBatch(train, std::span(order).subspan(s * config.batch_size + rank * per_rank, per_rank), inputs, labels);
      LoadWeights(sharded, model);
      const BatchLoss forward = model.Forward(inputs, labels, per_rank);
      // The mean over this rank's examples; the reduction averages the ranks' gradients.
      model.Backward(1.0f / static_cast<float>(per_rank), unused);
      for (std::size_t layer = layers; layer-- > 0;) {
        fsdp::FSDPShardingUnit& unit = sharded.Unit(layer);
        unit.Gather();
        unit.ReduceGradients(LayerTensors(model.Gradients(), layer));
        unit.Release();
      }
      sharded.Step(adam);
      result.steps += 1;
      // The demo's own bookkeeping goes over the world group, not counted with FSDP's traffic.
      epoch_loss +=
          world->AllReduceHost(forward.mean_loss, mlframework::distributed::ReduceOp::Sum) / static_cast<double>(ranks);
    }
    result.final_loss = epoch_loss / static_cast<double>(std::max<std::size_t>(steps_per_epoch, 1));
    if (config.progress && rank == 0) {
      std::fprintf(stderr, "  fsdp %-5s epoch %d/%d  loss %8.4f\n", std::string(wire.name).c_str(), epoch + 1,
                   config.epochs, result.final_loss);
    }
  }
  result.sent = counting->Sent();
  LoadWeights(sharded, model);
  result.test_accuracy = Evaluate(model, data.test);
  return result;
}

}  // namespace fashion_mnist
