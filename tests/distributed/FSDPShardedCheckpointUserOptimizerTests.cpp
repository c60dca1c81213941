// Resharding checkpoints of an optimizer the library does not know: its state travels through
// amp::IOptimizerState, saved at N simulated ranks and loaded at M, bit for bit.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "distributed/ReshardSupport.hpp"

namespace fsdp = mlframework::distributed::fsdp;
namespace amp = mlframework::amp;
using mlframework::GradientMap;
using mlfw_test::SimulatedRankGroup;

namespace {

// Signed momentum (Lion without its interpolation) over FP32 parameters: velocity = beta *
// velocity + gradient, parameter -= lr * sign(velocity). One state vector, one option.
class SignMomentum final : public amp::IOptimizer, public amp::IOptimizerState {
 public:
  SignMomentum(GradientMap parameters, float lr, float beta, std::string kind = "SignMomentum")
      : parameters_(std::move(parameters)), kind_(std::move(kind)), lr_(lr), beta_(beta) {
    for (const auto& [name, tensor] : parameters_) velocity_[name].assign(tensor->Size(), 0.0f);
  }

  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& gradients) override { gradients_ = gradients; }
  void Step() override {
    for (const auto& [name, tensor] : parameters_) {
      const std::vector<float> g = gradients_.at(name)->ToFloatVector();
      std::vector<float> p = tensor->ToFloatVector();
      std::vector<float>& v = velocity_[name];
      for (std::size_t i = 0; i < p.size(); ++i) {
        v[i] = beta_ * v[i] + g[i];
        p[i] -= lr_ * (v[i] > 0.0f ? 1.0f : (v[i] < 0.0f ? -1.0f : 0.0f));
      }
      tensor->CopyFromFloats(p);
    }
    ++steps_;
  }
  amp::IOptimizerState* State() noexcept override { return this; }

  std::string StateKind() const override { return kind_; }
  std::vector<std::pair<std::string, double>> StateOptions() const override { return {{"Beta", beta_}}; }
  double StateLearningRate() const noexcept override { return lr_; }
  void SetLearningRate(double learning_rate) override { lr_ = static_cast<float>(learning_rate); }
  std::int64_t StepCount() const noexcept override { return steps_; }
  const GradientMap& Parameters() const noexcept override { return parameters_; }
  std::vector<std::string> StateVectorNames() const override { return {"velocity"}; }
  std::span<const float> StateVector(const std::string& name, std::size_t index) const override {
    if (index != 0) throw mlframework::ArgumentError("index", "one state vector");
    const auto it = velocity_.find(name);
    if (it == velocity_.end()) throw mlframework::ArgumentError("name", "unknown parameter '" + name + "'");
    return it->second;
  }
  void ImportState(const std::map<std::string, amp::OptimizerParameterState>& state, std::int64_t steps) override {
    for (const auto& [name, tensor] : parameters_) {
      const amp::OptimizerParameterState& entry = state.at(name);
      tensor->CopyFromFloats(entry.Master);
      velocity_[name] = entry.Vectors.at(0);
    }
    steps_ = steps;
  }

 private:
  GradientMap parameters_;
  std::string kind_;
  GradientMap gradients_;
  std::map<std::string, std::vector<float>> velocity_;
  float lr_;
  float beta_;
  std::int64_t steps_ = 0;
};

// An optimizer that keeps its state to itself (IOptimizer::State() stays null).
class Opaque final : public amp::IOptimizer {
 public:
  GradientMap GetGradients() override { return {}; }
  void SetGradients(const GradientMap& /*gradients*/) override {}
  void Step() override {}
};

struct Rank {
  std::unique_ptr<fsdp::FSDP> model;
  std::unique_ptr<SignMomentum> optimizer;
};

std::vector<Rank> MakeWorld(int world, float amplitude, float beta = 0.75f) {
  std::vector<Rank> ranks(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    Rank& rank = ranks[static_cast<std::size_t>(r)];
    rank.model = std::make_unique<fsdp::FSDP>(std::make_shared<SimulatedRankGroup>(r, world));
    rank.model->RegisterUnit("embed", mlfw_test::ReshardEmbed(amplitude));
    rank.model->RegisterUnit("head", mlfw_test::ReshardHead(amplitude));
    rank.optimizer = std::make_unique<SignMomentum>(rank.model->ShardedParameters(), 0.01f, beta);
  }
  return ranks;
}

// One step on every rank with its range of the same global gradients.
void StepAll(std::vector<Rank>& ranks, int step) {
  for (Rank& rank : ranks) {
    for (std::size_t u = 0; u < rank.model->UnitCount(); ++u) {
      fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
      std::vector<float> g(unit.ShardSize(), 0.0f);
      for (std::size_t i = 0; i < g.size(); ++i) {
        const std::size_t e = unit.ShardOffset() + i;
        if (e < unit.NumElements())
          g[i] = static_cast<float>((e * 7 + u * 3 + static_cast<std::size_t>(step)) % 5) - 2.0f;
      }
      unit.SetLocalGradient(mlframework::FromVector(g, {g.size()}));
    }
    rank.model->Step(*rank.optimizer);
  }
}

// Masters (vector < 0) or the velocity of unit @p u over the whole world, element by element.
std::vector<float> Stitch(const std::vector<Rank>& ranks, std::size_t u, int vector) {
  std::vector<float> full(ranks.front().model->Unit(u).NumElements());
  for (const Rank& rank : ranks) {
    const fsdp::FSDPShardingUnit& unit = rank.model->Unit(u);
    std::vector<float> values = unit.LocalShard()->ToFloatVector();
    if (vector >= 0) {
      const std::span<const float> v = rank.optimizer->StateVector(unit.Name(), 0);
      values.assign(v.begin(), v.end());
    }
    BOOST_REQUIRE_EQUAL(values.size(), unit.ShardSize());
    for (std::size_t i = 0; i < values.size() && unit.ShardOffset() + i < full.size(); ++i) {
      full[unit.ShardOffset() + i] = values[i];
    }
  }
  return full;
}

void CheckSameState(const std::vector<Rank>& a, const std::vector<Rank>& b) {
  for (std::size_t u = 0; u < 2; ++u) {
    for (const int vector : {-1, 0}) {
      const std::vector<float> x = Stitch(a, u, vector);
      const std::vector<float> y = Stitch(b, u, vector);
      BOOST_REQUIRE_EQUAL(x.size(), y.size());
      BOOST_CHECK_MESSAGE(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0,
                          "unit " << u << (vector < 0 ? " masters" : " velocity") << " differ");
    }
  }
}

std::vector<std::vector<std::byte>> SaveAll(const std::vector<Rank>& ranks, std::int64_t step) {
  std::vector<std::vector<std::byte>> blobs;
  blobs.reserve(ranks.size());
  for (const Rank& rank : ranks) {
    blobs.push_back(rank.model->SaveShardedCheckpoint({.Optimizer = rank.optimizer.get(), .Step = step}));
  }
  return blobs;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpShardedCheckpointUserOptimizer)

BOOST_AUTO_TEST_CASE(a_user_optimizers_state_saved_at_three_ranks_loads_bit_identical_at_two_and_trains_on) {
  std::vector<Rank> saved = MakeWorld(3, 1.0f);
  StepAll(saved, 0);
  StepAll(saved, 1);
  for (Rank& rank : saved) rank.optimizer->SetLearningRate(0.005f);
  const auto blobs = SaveAll(saved, 2);

  std::vector<Rank> loaded = MakeWorld(2, 2.0f);  // other weights, zero velocity
  for (Rank& rank : loaded) {
    BOOST_CHECK_EQUAL(rank.model->LoadShardedCheckpoint(blobs, {.Optimizer = rank.optimizer.get()}), 2);
    BOOST_CHECK_EQUAL(rank.optimizer->StepCount(), 2);
    BOOST_CHECK_EQUAL(rank.optimizer->StateLearningRate(), 0.005f);
  }
  CheckSameState(saved, loaded);
  StepAll(saved, 2);
  StepAll(loaded, 2);
  CheckSameState(saved, loaded);
}

BOOST_AUTO_TEST_CASE(another_kind_other_options_or_no_state_are_refused_naming_the_optimizer) {
  std::vector<Rank> saved = MakeWorld(2, 1.0f);
  StepAll(saved, 0);
  const auto blobs = SaveAll(saved, 1);
  std::vector<Rank> loaded = MakeWorld(2, 2.0f);
  const std::vector<float> before = loaded.front().model->Unit(0).LocalShard()->ToFloatVector();
  const auto refused = [&](amp::IOptimizer& optimizer, const std::string& message) {
    BOOST_CHECK_EXCEPTION(
        static_cast<void>(loaded.front().model->LoadShardedCheckpoint(blobs, {.Optimizer = &optimizer})),
        mlframework::ArgumentError, [&](const mlframework::ArgumentError& error) {
          BOOST_TEST_MESSAGE(error.what());
          return std::string(error.what()).find(message) != std::string::npos;
        });
    BOOST_CHECK(loaded.front().model->Unit(0).LocalShard()->ToFloatVector() == before);
  };
  mlframework::optimizers::Adam adam(loaded.front().model->ShardedParameters());
  refused(adam, "is Adam but the checkpoint holds SignMomentum state");
  SignMomentum other_beta(loaded.front().model->ShardedParameters(), 0.01f, 0.5f);
  refused(other_beta, "SignMomentum option Beta is 0.750000 in the checkpoint, 0.500000 here");
  Opaque opaque;
  refused(opaque, "hands out no state");
  BOOST_CHECK_THROW(static_cast<void>(saved.front().model->SaveShardedCheckpoint({.Optimizer = &opaque})),
                    mlframework::ArgumentError);
  // The library's kind names are taken: a blob would describe this optimizer as Adam.
  SignMomentum posing(saved.front().model->ShardedParameters(), 0.01f, 0.75f, "Adam");
  BOOST_CHECK_EXCEPTION(static_cast<void>(saved.front().model->SaveShardedCheckpoint({.Optimizer = &posing})),
                        mlframework::ArgumentError, [](const mlframework::ArgumentError& error) {
                          return std::string(error.what()).find("give it another name") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
