// The externally owned GPT-2-small gradients of bench_zero_copy (bench_zero_copy.hpp).
#include <cstddef>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Float16.hpp>

#include "../bench_zero_copy.hpp"

namespace mlfw_zc {

using namespace mlframework;

namespace {

std::vector<std::pair<std::string, Shape>> Gpt2SmallShapes() {
  constexpr std::size_t kModel = 768;
  std::vector<std::pair<std::string, Shape>> shapes;
  for (std::size_t l = 0; l < 12; ++l) {
    std::string p = "h";  // built by appends: GCC 12's -Wrestrict misfires on "h" + ... + "."
    p += std::to_string(l);
    p += '.';
    shapes.push_back({p + "ln_1.weight", {kModel}});
    shapes.push_back({p + "ln_1.bias", {kModel}});
    shapes.push_back({p + "attn.c_attn.weight", {kModel, 3 * kModel}});
    shapes.push_back({p + "attn.c_attn.bias", {3 * kModel}});
    shapes.push_back({p + "attn.c_proj.weight", {kModel, kModel}});
    shapes.push_back({p + "attn.c_proj.bias", {kModel}});
    shapes.push_back({p + "ln_2.weight", {kModel}});
    shapes.push_back({p + "ln_2.bias", {kModel}});
    shapes.push_back({p + "mlp.c_fc.weight", {kModel, 4 * kModel}});
    shapes.push_back({p + "mlp.c_fc.bias", {4 * kModel}});
    shapes.push_back({p + "mlp.c_proj.weight", {4 * kModel, kModel}});
    shapes.push_back({p + "mlp.c_proj.bias", {kModel}});
  }
  shapes.push_back({"ln_f.weight", {kModel}});
  shapes.push_back({"ln_f.bias", {kModel}});
  return shapes;
}

}  // namespace

float Value(std::size_t k, std::size_t i) {
  static const std::vector<float> kPool = [] {
    std::vector<float> pool(std::size_t{1} << 16);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 64.0f);
    for (float& v : pool) {
      v = static_cast<float>(Float16(normal(rng)));  // FP16-exact, so both dtypes hold the same values
    }
    return pool;
  }();
  return kPool[(i * 7919 + k * 104729) & (kPool.size() - 1)];
}

const std::vector<ExternalGradient>& External(DataType dtype) {
  struct Store {
    std::vector<ExternalGradient> gradients;
    std::vector<std::unique_ptr<std::byte[], void (*)(std::byte*)>> buffers;
  };
  static std::map<DataType, Store> stores;
  Store& store = stores[dtype];
  if (!store.gradients.empty()) {
    return store.gradients;
  }
  std::size_t k = 0;
  for (auto& [name, shape] : Gpt2SmallShapes()) {
    const std::size_t n = ElementCount(shape);
    const std::size_t bytes = n * ElementSize(dtype);
    auto* data = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
    store.buffers.emplace_back(data, [](std::byte* p) { ::operator delete (p, std::align_val_t{64}); });
    for (std::size_t i = 0; i < n; ++i) {
      if (dtype == DataType::Float16) {
        reinterpret_cast<Float16*>(data)[i] = Float16(Value(k, i));
      } else {
        reinterpret_cast<float*>(data)[i] = Value(k, i);
      }
    }
    store.gradients.push_back({name, shape, data, bytes});
    ++k;
  }
  return store.gradients;
}

}  // namespace mlfw_zc
