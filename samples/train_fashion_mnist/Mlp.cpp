#include "Mlp.hpp"

#include "Fp8Codec.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

namespace fashion_mnist {

namespace {

using mlframework::DataType;
using mlframework::ITensor;
using mlframework::TensorPtr;
namespace cpu = mlframework::backends::cpu;

template <DataType D>
using DType = std::integral_constant<DataType, D>;

// Calls f with the dtype as a compile-time constant: one branch per buffer, none per element.
template <class F>
decltype(auto) Dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::Float16:
      return std::forward<F>(f)(DType<DataType::Float16>{});
    case DataType::BFloat16:
      return std::forward<F>(f)(DType<DataType::BFloat16>{});
    case DataType::Float8E4M3FN:
    case DataType::Float8E5M2:  // refused by the constructor
    case DataType::Float32:
      break;
  }
  return std::forward<F>(f)(DType<DataType::Float32>{});
}

template <DataType D>
float RoundTo(float value) {
  if constexpr (D == DataType::Float32) {
    return value;
  } else {
    using Storage = typename cpu::StorageOf<D>::type;
    return static_cast<float>(Storage(value));
  }
}

#if defined(__x86_64__)
// FP16 rounding with the F16C instructions (the same round-to-nearest-even as
// FloatToHalfBits, subnormals included), 8 values at a time: the scalar
// conversion would cost more than the matrix products. Writes the rounded
// floats to @p rounded and/or the half bits to @p halves (either may be null).
__attribute__((target("avx,f16c"))) std::size_t RoundHalfF16c(const float* values, std::size_t n, float* rounded,
                                                              std::uint16_t* halves, std::uint64_t& nonzero,
                                                              std::uint64_t& flushed) {
  const __m256 zero = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(values + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    const __m256 r = _mm256_cvtph_ps(h);
    const auto nonzero_mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_UQ)));
    const auto zero_mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(r, zero, _CMP_EQ_OQ)));
    nonzero += static_cast<std::uint64_t>(__builtin_popcount(nonzero_mask));
    flushed += static_cast<std::uint64_t>(__builtin_popcount(nonzero_mask & zero_mask));
    if (rounded != nullptr) {
      _mm256_storeu_ps(rounded + i, r);
    }
    if (halves != nullptr) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(halves + i), h);
    }
  }
  return i;  // the caller finishes the tail
}

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool HaveF16c() {
  static const bool kHave = [] {
    unsigned int eax = 0;
    unsigned int ebx = 0;
    unsigned int ecx = 0;
    unsigned int edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0 && __builtin_cpu_supports("avx");
  }();
  return kHave;
}
#endif

// Rounds values into D in place; counts non-zero values that became zero when @p count is given.
template <DataType D>
void RoundInPlace(std::span<float> values, UnderflowCount* count) {
  if constexpr (D == DataType::Float32) {
    if (count != nullptr) {
      count->nonzero +=
          static_cast<std::uint64_t>(std::count_if(values.begin(), values.end(), [](float v) { return v != 0.0f; }));
    }
  } else {
    std::uint64_t nonzero = 0;
    std::uint64_t flushed = 0;
    std::size_t done = 0;
#if defined(__x86_64__)
    if constexpr (D == DataType::Float16) {
      if (HaveF16c()) {
        done = RoundHalfF16c(values.data(), values.size(), values.data(), nullptr, nonzero, flushed);
      }
    }
#endif
    for (float& v : values.subspan(done)) {
      const float rounded = RoundTo<D>(v);
      nonzero += v != 0.0f ? 1u : 0u;
      flushed += (v != 0.0f && rounded == 0.0f) ? 1u : 0u;
      v = rounded;
    }
    if (count != nullptr) {
      count->nonzero += nonzero;
      count->flushed += flushed;
    }
  }
}

// Writes FP32 values rounded into tensor @p dst of dtype D, counting flushes.
template <DataType D>
void StoreInto(std::span<const float> values, ITensor& dst, UnderflowCount& count) {
  auto out = cpu::Elements<D>(dst);
  std::uint64_t nonzero = 0;
  std::uint64_t flushed = 0;
  std::size_t done = 0;
#if defined(__x86_64__)
  if constexpr (D == DataType::Float16) {
    if (HaveF16c()) {
      static_assert(sizeof(mlframework::Float16) == sizeof(std::uint16_t));
      done = RoundHalfF16c(values.data(), values.size(), nullptr, reinterpret_cast<std::uint16_t*>(out.data()), nonzero,
                           flushed);
    }
  }
#endif
  for (std::size_t i = done; i < values.size(); ++i) {
    const float v = values[i];
    const typename cpu::StorageOf<D>::type stored(v);
    nonzero += v != 0.0f ? 1u : 0u;
    flushed += (v != 0.0f && static_cast<float>(stored) == 0.0f) ? 1u : 0u;
    out[i] = stored;
  }
  count.nonzero += nonzero;
  count.flushed += flushed;
}

// A 2-D row-major FP32 view of a CPU tensor's memory for BLAS.
auto Matrix(const TensorPtr& tensor, std::size_t rows, std::size_t cols) {
  auto* data = static_cast<float*>(cpu::MutableData(*tensor));
  return xt::adapt(data, rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
}

void Resize(xt::xtensor<float, 2>& matrix, std::size_t rows, std::size_t cols) {
  if (matrix.shape()[0] != rows || matrix.shape()[1] != cols) {
    matrix.resize({rows, cols});
  }
}

}  // namespace

Mlp::Mlp(std::vector<std::size_t> sizes, DataType storage, std::uint64_t seed, float init_gain)
    : sizes_(std::move(sizes)), storage_(storage) {
  if (sizes_.size() < 2) {
    throw mlframework::ArgumentError(
        "sizes", "needs an input and an output size, got " + std::to_string(sizes_.size()) + " sizes");
  }
  if (mlframework::IsFloat8(storage_)) {
    // FP8 storage needs a scale per tensor; this network's plain rounding would lose the gradients.
    throw mlframework::ArgumentError("storage", std::string(mlframework::ToString(storage_)) +
                                                    " is not a storage dtype of this network (Float32, Float16, "
                                                    "BFloat16)");
  }
  std::mt19937_64 rng(seed);
  for (std::size_t k = 0; k + 1 < sizes_.size(); ++k) {
    Layer layer;
    layer.in = sizes_[k];
    layer.out = sizes_[k + 1];
    std::normal_distribution<float> normal(0.0f, init_gain * std::sqrt(2.0f / static_cast<float>(layer.in)));
    std::vector<float> weights(layer.in * layer.out);
    for (float& w : weights) {
      w = normal(rng);
    }
    const std::string prefix = "layer" + std::to_string(k);
    layer.weight = mlframework::FromVector(weights, {layer.out, layer.in}, storage_);
    layer.bias = mlframework::Zeros({layer.out}, storage_);
    layer.weight_grad = mlframework::Zeros({layer.out, layer.in}, storage_);
    layer.bias_grad = mlframework::Zeros({layer.out}, storage_);
    if (storage_ == DataType::Float32) {
      layer.weight_wide = layer.weight;
      layer.bias_wide = layer.bias;
    } else {
      layer.weight_wide = mlframework::Zeros({layer.out, layer.in}, DataType::Float32);
      layer.bias_wide = mlframework::Zeros({layer.out}, DataType::Float32);
    }
    parameters_[prefix + ".weight"] = layer.weight;
    parameters_[prefix + ".bias"] = layer.bias;
    gradients_[prefix + ".weight"] = layer.weight_grad;
    gradients_[prefix + ".bias"] = layer.bias_grad;
    layers_.push_back(std::move(layer));
  }
  activations_.resize(sizes_.size());
  deltas_.resize(layers_.size());
  RefreshWeights();
}

void Mlp::UseFp8(Fp8Codec* codec) {
  if (codec != nullptr && storage_ != DataType::Float32) {
    throw mlframework::ArgumentError("codec", "needs a Float32 network (the FP32 values it quantizes), storage is " +
                                                  std::string(mlframework::ToString(storage_)));
  }
  fp8_ = codec;
  for (Layer& layer : layers_) {
    // The products read the decoded FP8 weights, no longer the FP32 parameters themselves.
    layer.weight_wide = codec != nullptr ? mlframework::Zeros({layer.out, layer.in}, DataType::Float32) : layer.weight;
  }
}

void Mlp::RefreshWeights() {
  if (storage_ == DataType::Float32) {
    return;
  }
  std::vector<TensorPtr> src;
  std::vector<TensorPtr> dst;
  for (const Layer& layer : layers_) {
    src.push_back(layer.weight);
    src.push_back(layer.bias);
    dst.push_back(layer.weight_wide);
    dst.push_back(layer.bias_wide);
  }
  // The library's fused cast: one pass over all weights.
  mlframework::CastInto(src, dst);
}

BatchLoss Mlp::Forward(std::span<const float> inputs, std::span<const std::uint8_t> labels, std::size_t batch) {
  const std::size_t features = sizes_.front();
  if (inputs.size() != batch * features || labels.size() != batch) {
    throw mlframework::ArgumentError("inputs", "has " + std::to_string(inputs.size()) + " values and " +
                                                   std::to_string(labels.size()) + " labels for a batch of " +
                                                   std::to_string(batch) + " x " + std::to_string(features));
  }
  batch_ = batch;
  labels_.assign(labels.begin(), labels.end());
  Resize(activations_[0], batch, features);
  std::copy(inputs.begin(), inputs.end(), activations_[0].begin());
  Dispatch(storage_, [&](auto d) {
    constexpr DataType kD = decltype(d)::value;
    RoundInPlace<kD>({activations_[0].data(), activations_[0].size()}, nullptr);
    for (std::size_t k = 0; k < layers_.size(); ++k) {
      const Layer& layer = layers_[k];
      if (fp8_ != nullptr) {
        const std::string prefix = "layer" + std::to_string(k);
        const auto* master = static_cast<const float*>(cpu::Data(*layer.weight));
        fp8_->RoundTrip(prefix + ".weight", mlframework::fp8::TensorRole::Forward, {master, layer.out * layer.in},
                        {static_cast<float*>(cpu::MutableData(*layer.weight_wide)), layer.out * layer.in}, nullptr);
        std::span<float> input(activations_[k].data(), activations_[k].size());
        fp8_->RoundTrip(prefix + ".input", mlframework::fp8::TensorRole::Forward, input, input, nullptr);
      }
      xt::xtensor<float, 2>& out = activations_[k + 1];
      Resize(out, batch, layer.out);
      auto weight = Matrix(layer.weight_wide, layer.out, layer.in);
      xt::blas::gemm(activations_[k], weight, out, false, true);
      const auto* bias = static_cast<const float*>(cpu::Data(*layer.bias_wide));
      const bool hidden = k + 1 < layers_.size();
      for (std::size_t b = 0; b < batch; ++b) {
        float* row = out.data() + b * layer.out;
        for (std::size_t j = 0; j < layer.out; ++j) {
          const float z = RoundTo<kD>(row[j] + bias[j]);
          row[j] = hidden ? std::max(z, 0.0f) : z;
        }
      }
    }
  });

  // Softmax cross-entropy in FP32 from the stored logits (autocast keeps losses in FP32).
  const std::size_t classes = sizes_.back();
  xt::xtensor<float, 2>& probs = deltas_.back();
  Resize(probs, batch, classes);
  BatchLoss result;
  double loss_sum = 0.0;
  for (std::size_t b = 0; b < batch; ++b) {
    const float* logits = activations_.back().data() + b * classes;
    float* p = probs.data() + b * classes;
    const float max_logit = *std::max_element(logits, logits + classes);
    float sum = 0.0f;
    for (std::size_t c = 0; c < classes; ++c) {
      p[c] = std::exp(logits[c] - max_logit);
      sum += p[c];
    }
    for (std::size_t c = 0; c < classes; ++c) {
      p[c] /= sum;
    }
    const std::size_t label = labels[b];
    loss_sum += static_cast<double>(std::log(sum) - (logits[label] - max_logit));
    const auto arg_max = static_cast<std::size_t>(std::max_element(logits, logits + classes) - logits);
    result.correct += arg_max == label ? 1u : 0u;
  }
  result.mean_loss = loss_sum / static_cast<double>(batch);
  result.finite = std::isfinite(result.mean_loss);
  return result;
}

void Mlp::Backward(float seed, UnderflowCount& count) {
  if (batch_ == 0) {
    throw mlframework::InvalidOperationError("Mlp::Backward needs a Forward() first");
  }
  const std::size_t batch = batch_;
  Dispatch(storage_, [&](auto d) {
    constexpr DataType kD = decltype(d)::value;
    // d(seed * CE)/dlogits = seed * (softmax - onehot), in FP32, then rounded as the GPU would store it.
    xt::xtensor<float, 2>& top = deltas_.back();
    const std::size_t classes = sizes_.back();
    for (std::size_t b = 0; b < batch; ++b) {
      float* row = top.data() + b * classes;
      for (std::size_t c = 0; c < classes; ++c) {
        row[c] = seed * (row[c] - (c == labels_[b] ? 1.0f : 0.0f));
      }
    }
    // Under FP8 the counts cover the E5M2 gradients only (below); the FP32 ones cannot flush.
    UnderflowCount unstored;
    UnderflowCount& stored = fp8_ != nullptr ? unstored : count;
    RoundInPlace<kD>({top.data(), top.size()}, &stored);

    for (std::size_t k = layers_.size(); k-- > 0;) {
      const Layer& layer = layers_[k];
      xt::xtensor<float, 2>& delta = deltas_[k];
      if (fp8_ != nullptr) {
        std::span<float> values(delta.data(), delta.size());
        fp8_->RoundTrip("layer" + std::to_string(k) + ".grad_output", mlframework::fp8::TensorRole::Gradient, values,
                        values, &count);
      }
      Resize(weight_grad_wide_, layer.out, layer.in);
      xt::blas::gemm(delta, activations_[k], weight_grad_wide_, true, false);
      StoreInto<kD>({weight_grad_wide_.data(), weight_grad_wide_.size()}, *layer.weight_grad, stored);
      bias_grad_wide_.assign(layer.out, 0.0f);
      for (std::size_t b = 0; b < batch; ++b) {
        const float* row = delta.data() + b * layer.out;
        for (std::size_t j = 0; j < layer.out; ++j) {
          bias_grad_wide_[j] += row[j];
        }
      }
      StoreInto<kD>(bias_grad_wide_, *layer.bias_grad, stored);
      if (k == 0) {
        break;
      }
      Resize(dinput_, batch, layer.in);
      auto weight = Matrix(layer.weight_wide, layer.out, layer.in);
      xt::blas::gemm(delta, weight, dinput_, false, false);
      // Through the ReLU of the layer below: its output is activations_[k].
      const xt::xtensor<float, 2>& below = activations_[k];
      xt::xtensor<float, 2>& next = deltas_[k - 1];
      Resize(next, batch, layer.in);
      for (std::size_t i = 0; i < next.size(); ++i) {
        next.data()[i] = below.data()[i] > 0.0f ? dinput_.data()[i] : 0.0f;
      }
      RoundInPlace<kD>({next.data(), next.size()}, &stored);
    }
  });
}

}  // namespace fashion_mnist
