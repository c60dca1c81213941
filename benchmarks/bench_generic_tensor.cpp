// Unscale + overflow check (mlframework::UnscaleAndCheck) on the gradients of GPT-2 small's 12
// transformer blocks and final layer norm (d_model 768: 146 tensors, 85M elements, the list of
// issue 30's libtorch measurement; the block layout of bench_gradient_conversion's GptShapes at
// GPT-2-small size), held as:
//
// - native: the library's own CPU tensors;
// - host:   a framework's tensor without a backend that exposes its host memory through
//           ITensor::HostStorage() (docs/own-tensors.md, VectorTensor plus HostStorage);
// - opaque: a tensor without a backend and without host bytes (the floats fallback: each tensor
//           read with CopyToFloats(), scaled, written back with CopyFromFloats()).
//
// generic/unscale_check/<kind>/<dtype>: each iteration times the kind's call and the native call
// on a second copy of the same gradients, back to back; the iteration time is the kind's and the
// counter over_native is the median over the iterations of its time over the native call's.
//
// Run: bench_generic_tensor --benchmark_format=json > out.json (see docs/BENCHMARKS.md).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/mlframework.hpp>

namespace {

using mlframework::DataType;
using mlframework::Shape;
using mlframework::TensorPtr;

constexpr std::size_t kModel = 768;
constexpr std::size_t kLayers = 12;

std::vector<Shape> Gpt2SmallShapes() {
  std::vector<Shape> shapes;
  for (std::size_t l = 0; l < kLayers; ++l) {
    for (const Shape& s : std::vector<Shape>{{kModel},
                                             {kModel},
                                             {kModel, 3 * kModel},
                                             {3 * kModel},
                                             {kModel, kModel},
                                             {kModel},
                                             {kModel},
                                             {kModel},
                                             {kModel, 4 * kModel},
                                             {4 * kModel},
                                             {4 * kModel, kModel},
                                             {kModel}}) {
      shapes.push_back(s);
    }
  }
  shapes.push_back({kModel});
  shapes.push_back({kModel});
  return shapes;
}

// A framework's tensor: elements in a byte vector it owns, no backend. With `host`, it tells the
// library where they are (HostStorage); without, it has only its virtuals, and overrides the
// one-pass UnscaleAndCheck as docs/own-tensors.md suggests.
class FrameworkTensor final : public mlframework::ITensor {
 public:
  FrameworkTensor(Shape shape, DataType dtype, bool host)
      : shape_(std::move(shape)),
        dtype_(dtype),
        host_(host),
        size_(mlframework::ElementCount(shape_)),
        bytes_(size_ * mlframework::ElementSize(dtype)) {}

  DataType GetDataType() const override { return dtype_; }
  mlframework::Device GetDevice() const override { return mlframework::Device::CPU(); }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return size_; }
  std::vector<float> ToFloatVector() const override {
    std::vector<float> values(size_);
    mlframework::ConvertHostElements(bytes_.data(), dtype_, values.data(), DataType::Float32, size_);
    return values;
  }
  void CopyFromFloats(std::span<const float> values) override {
    mlframework::ConvertHostElements(values.data(), DataType::Float32, bytes_.data(), dtype_, size_);
  }

 protected:
  std::span<std::byte> HostStorage() const noexcept override {
    return host_ ? std::span<std::byte>(const_cast<std::byte*>(bytes_.data()), bytes_.size()) : std::span<std::byte>();
  }

 private:
  Shape shape_;
  DataType dtype_;
  bool host_;
  std::size_t size_;
  std::vector<std::byte> bytes_;
};

// Values in [-1, 1), the same for every kind, so all calls do the same work.
void Fill(const TensorPtr& tensor) {
  std::vector<float> values(tensor->Size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>((i * 7919) % 4096) / 2048.0f - 1.0f;
  }
  tensor->CopyFromFloats(values);
}

enum class Kind { Native, Host, Opaque };

std::vector<TensorPtr> Gradients(Kind kind, DataType dtype) {
  std::vector<TensorPtr> list;
  for (const Shape& shape : Gpt2SmallShapes()) {
    list.push_back(kind == Kind::Native ? mlframework::Zeros(shape, dtype)
                                        : std::make_shared<FrameworkTensor>(shape, dtype, kind == Kind::Host));
    Fill(list.back());
  }
  return list;
}

double Seconds(const std::vector<TensorPtr>& list, float factor) {
  const auto start = std::chrono::steady_clock::now();
  benchmark::DoNotOptimize(mlframework::UnscaleAndCheck(list, factor));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void Register(Kind kind, const char* kind_name, DataType dtype) {
  const std::string name =
      std::string("generic/unscale_check/") + kind_name + "/" + std::string(mlframework::ToString(dtype));
  benchmark::RegisterBenchmark(name.c_str(),
                               [kind, dtype](benchmark::State& state) {
                                 const std::vector<TensorPtr> list = Gradients(kind, dtype);
                                 const std::vector<TensorPtr> native = Gradients(Kind::Native, dtype);
                                 std::size_t elements = 0;
                                 for (const TensorPtr& t : list) {
                                   elements += t->Size();
                                 }
                                 std::vector<double> over_native;
                                 float factor = 0.5f;  // alternates with 2: the values come back exactly each two calls
                                 for (auto _ : state) {
                                   const double kind_s = Seconds(list, factor);
                                   const double native_s = Seconds(native, factor);
                                   factor = factor == 0.5f ? 2.0f : 0.5f;
                                   state.SetIterationTime(kind_s);
                                   over_native.push_back(kind_s / native_s);
                                 }
                                 state.counters["tensors"] = static_cast<double>(list.size());
                                 state.counters["elements"] = static_cast<double>(elements);
                                 state.counters["over_native"] = Median(over_native);
                                 state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * elements));
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::AddCustomContext("mlfw_instruction_set", std::string(mlframework::backends::cpu::InstructionSet()));
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    Register(Kind::Native, "native", dtype);
    Register(Kind::Host, "host", dtype);
    Register(Kind::Opaque, "opaque", dtype);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
