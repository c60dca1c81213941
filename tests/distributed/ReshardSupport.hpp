#pragma once
// Shared by the resharding checkpoint suites: a process group that plays one rank of a larger
// world inside one process (so N "ranks" of an FSDP can be built side by side and their blobs
// saved), and a model whose reduced gradients are exact at any world size (so training at 2,
// 3 and 4 ranks follows bit-identical trajectories and a resumed run can be compared bit for bit).

#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

namespace mlfw_test {

// Rank `rank` of a world of `world` ranks, alone in this process: agreement all-reduces see
// only this rank's values (every simulated rank runs the same checks), broadcast and barrier
// do nothing, and the data collectives are refused (the tests that use this group never need
// another rank's data).
class SimulatedRankGroup final : public mlframework::distributed::IProcessGroup {
 public:
  SimulatedRankGroup(int rank, int world) : rank_(rank), world_(world) {}
  int Rank() const noexcept override { return rank_; }
  int WorldSize() const noexcept override { return world_; }
  std::string_view BackendName() const noexcept override { return "simulated"; }
  void AllGather(const mlframework::ITensor& /*input*/, mlframework::ITensor& /*output*/) override { Refuse(); }
  void ReduceScatter(const mlframework::ITensor& /*input*/, mlframework::ITensor& /*output*/,
                     mlframework::distributed::ReduceOp /*op*/) override {
    Refuse();
  }
  void AllReduce(mlframework::ITensor& /*tensor*/, mlframework::distributed::ReduceOp /*op*/) override { Refuse(); }
  void Broadcast(mlframework::ITensor& /*tensor*/, int /*root*/) override {}
  void Barrier() override {}
  void AllReduceHost(std::span<double> /*values*/, mlframework::distributed::ReduceOp /*op*/) override {}
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& message) noexcept override { aborted_ = message; }
  const std::string& Aborted() const noexcept { return aborted_; }

 private:
  [[noreturn]] static void Refuse() {
    throw mlframework::InvalidOperationError("SimulatedRankGroup moves no data between ranks");
  }
  int rank_;
  int world_;
  std::string aborted_;
};

// Two units with padding at 2, 3 and 4 ranks: "embed" 47 elements, "head" 11.
inline mlframework::GradientMap ReshardEmbed(float amplitude = 1.0f) {
  std::vector<float> w(42);
  std::vector<float> b(5);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = amplitude * std::sin(0.7f * static_cast<float>(i) + 0.2f);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = amplitude * std::cos(1.1f * static_cast<float>(i));
  return {{"weight", mlframework::FromVector(w, {6, 7})}, {"bias", mlframework::FromVector(b, {5})}};
}
inline mlframework::GradientMap ReshardHead(float amplitude = 1.0f) {
  std::vector<float> w(9);
  std::vector<float> b(2);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = amplitude * std::sin(1.9f * static_cast<float>(i) + 0.5f);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = amplitude * (0.25f + static_cast<float>(i));
  return {{"weight", mlframework::FromVector(w, {3, 3})}, {"bias", mlframework::FromVector(b, {2})}};
}

// The model L(w) = sum_e (D_e(step) / 4) |w_e| with D_e a sum of 12 samples' small dyadic
// numbers: its gradient sign(w_e) D_e / 4 is exact, and so is its data-parallel reduction at
// 2, 3 and 4 ranks. Rank r of W hands W * (its samples' part of D) / 4 * sign(w): the sum over
// ranks is exact (multiples of 1/256, far from rounding), and the FP32 reduction's average,
// sum * fl(1/W), rounds back to exactly D / 4 (for W = 3, W * fl(1/3) = 1 + 2^-25).
struct ExactModel {
  static constexpr int kSamples = 12;

  // Sample i's value for flat element e of unit u at @p step: k / 64, k in [-8, 8].
  static float Sample(int i, std::size_t u, std::size_t e, int step) {
    const long k = (static_cast<long>(i) * 7 + static_cast<long>(e) * 3 + static_cast<long>(u) * 5 +
                    static_cast<long>(step) * 11) %
                   17;
    return static_cast<float>(k - 8) / 64.0f;
  }
  // Samples [first, first + count) of the global batch summed for element e.
  static float PartialSum(int first, int count, std::size_t u, std::size_t e, int step) {
    float sum = 0.0f;
    for (int i = first; i < first + count; ++i) sum += Sample(i, u, e, step);
    return sum;
  }
  // The full FP32 gradients rank @p rank of @p world hands ReduceGradients() for unit @p u,
  // given the gathered parameter views (in layout order, element e flat across them).
  static mlframework::GradientMap RankGradients(const mlframework::distributed::fsdp::FSDPShardingUnit& unit,
                                                std::size_t u, int rank, int world, int step) {
    const int per_rank = kSamples / world;
    mlframework::GradientMap gradients;
    std::size_t e = 0;
    for (const std::string& name : unit.ParameterNames()) {
      const std::vector<float> w = unit.Parameters().at(name)->ToFloatVector();
      std::vector<float> g(w.size());
      for (std::size_t i = 0; i < w.size(); ++i, ++e) {
        const float sign = w[i] > 0.0f ? 1.0f : (w[i] < 0.0f ? -1.0f : 0.0f);
        g[i] = sign * static_cast<float>(world) * PartialSum(rank * per_rank, per_rank, u, e, step) / 4.0f;
      }
      gradients.emplace(name, mlframework::FromVector(g, unit.ParameterShape(name)));
    }
    return gradients;
  }
  // The loss at @p step from the full parameters ("unit.parameter" names), in a fixed order.
  static double Loss(const mlframework::GradientMap& full, const std::vector<std::string>& units, int step) {
    double loss = 0.0;
    for (std::size_t u = 0; u < units.size(); ++u) {
      std::size_t e = 0;
      // The parameters of a unit in layout (name) order, as in the map.
      for (const auto& [name, tensor] : full) {
        if (name.rfind(units[u] + ".", 0) != 0) continue;
        for (const float w : tensor->ToFloatVector()) {
          loss += static_cast<double>(PartialSum(0, kSamples, u, e++, step)) / 4.0 * std::fabs(w);
        }
      }
    }
    return loss;
  }
};

}  // namespace mlfw_test
