// CUDA multi-tensor kernels against the limit kernel: a device-to-device copy
// moving the same number of bytes through memory (bytes read + bytes written).
// Each benchmark reports the kernel's time and bytes/s; the copy_* benchmarks
// with the same arguments are the limit, so ratio = copy time / kernel time.
//
//   bench_cuda_kernels --benchmark_format=json
//
// Arguments: {layout, dtype}. layout 0: one tensor of 2^26 elements; layout 1:
// 4096 tensors of 2^14 elements; layout 2: 10000 tensors of 1000 elements
// (launch-bound). dtype 0: FP32, 1: FP16. The FP8 gradient wire's kernels take {parts}: a
// reduce-scatter of 2^26 values over 2 or 8 ranks. Every call passes the same list again,
// so the backend reuses the list's uploaded table; BM_unscale_rewrapped_* wrap
// the same memory in new tensors each call (table found) or change the order
// each call (table uploaded every call). Without a CUDA device the program
// says so and exits 0.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

using namespace mlframework;
namespace cuda = mlframework::backends::cuda;

namespace {

const Device kGpu = Device::CUDA(0);

struct Layout {
  std::size_t tensors;
  std::size_t elements;
};

Layout LayoutOf(std::int64_t index) {
  switch (index) {
    case 1:
      return {4096, std::size_t{1} << 14};
    case 2:
      return {10000, 1000};
    default:
      return {1, std::size_t{1} << 26};
  }
}

DataType DtypeOf(std::int64_t index) { return index == 1 ? DataType::Float16 : DataType::Float32; }

std::vector<TensorPtr> MakeList(const benchmark::State& state, DataType dtype) {
  const Layout layout = LayoutOf(state.range(0));
  std::vector<TensorPtr> list;
  const std::vector<float> values(layout.elements, 0.25f);
  for (std::size_t i = 0; i < layout.tensors; ++i) {
    list.push_back(FromVector(values, {layout.elements}, dtype, kGpu));
  }
  return list;
}

std::size_t Bytes(const std::vector<TensorPtr>& list) {
  std::size_t bytes = 0;
  for (const TensorPtr& t : list) {
    bytes += t->Size() * ElementSize(t->GetDataType());
  }
  return bytes;
}

bool Check(benchmark::State& state, cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    state.SkipWithError((std::string(call) + ": " + cudaGetErrorString(status)).c_str());
    return false;
  }
  return true;
}

// Times fn on @p stream with CUDA events; `traffic` is bytes read + written per call.
template <typename Fn>
void TimeOnStream(benchmark::State& state, cudaStream_t stream, std::size_t traffic, Fn&& fn) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  if (!Check(state, cudaEventCreate(&start), "cudaEventCreate") ||
      !Check(state, cudaEventCreate(&stop), "cudaEventCreate")) {
    return;
  }
  fn();  // warm-up
  cuda::Synchronize(0);
  double host_seconds = 0.0;
  for (auto _ : state) {
    if (!Check(state, cudaEventRecord(start, stream), "cudaEventRecord")) {
      break;
    }
    const auto host_start = std::chrono::steady_clock::now();
    fn();
    host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
    float ms = 0.0f;
    if (!Check(state, cudaEventRecord(stop, stream), "cudaEventRecord") ||
        !Check(state, cudaEventSynchronize(stop), "cudaEventSynchronize") ||
        !Check(state, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime")) {
      break;
    }
    state.SetIterationTime(static_cast<double>(ms) / 1000.0);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(traffic));
  state.counters["traffic_bytes"] = static_cast<double>(traffic);
  // Host time of the call: planning and enqueueing, plus the wait for the result where the
  // operation returns one. When it is close to the device time, the host is the bottleneck.
  state.counters["host_us"] = benchmark::Counter(host_seconds * 1e6, benchmark::Counter::kAvgIterations);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// Times fn on the backend's stream (TimeOnStream).
template <typename Fn>
void TimeOnDevice(benchmark::State& state, std::size_t traffic, Fn&& fn) {
  TimeOnStream(state, static_cast<cudaStream_t>(cuda::StreamHandle(0)), traffic, static_cast<Fn&&>(fn));
}

// The limit: one device-to-device copy of traffic / 2 bytes (it reads and writes them).
void CopyOfTraffic(benchmark::State& state, std::size_t traffic) {
  const std::size_t bytes = traffic / 2;
  void* src = nullptr;
  void* dst = nullptr;
  if (!Check(state, cudaMalloc(&src, bytes), "cudaMalloc") || !Check(state, cudaMalloc(&dst, bytes), "cudaMalloc")) {
    return;
  }
  auto stream = static_cast<cudaStream_t>(cuda::StreamHandle(0));
  TimeOnDevice(state, traffic, [&] {
    Check(state, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  });
  cudaFree(src);
  cudaFree(dst);
}

std::size_t TrafficOf(benchmark::State& state, std::size_t reads_per_element_bytes, std::size_t writes) {
  const Layout layout = LayoutOf(state.range(0));
  return layout.tensors * layout.elements * (reads_per_element_bytes + writes);
}

void BM_unscale_and_check(benchmark::State& state) {
  const auto list = MakeList(state, DtypeOf(state.range(1)));
  TimeOnDevice(state, 2 * Bytes(list), [&] { benchmark::DoNotOptimize(UnscaleAndCheck(list, 1.0f)); });
}

void BM_unscale_device_state(benchmark::State& state) {
  const auto list = MakeList(state, DtypeOf(state.range(1)));
  const DeviceScalingBackend& backend = cuda::Backend();
  const ScalePolicy policy{.InitialScale = 1.0f};
  auto scale_state = backend.CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  // A whole scaler step without a host synchronisation: unscale by the device scale, then update it.
  TimeOnDevice(state, 2 * Bytes(list), [&] {
    WritePass(list, {}, {.State = scale_state.get()});
    backend.UpdateScale(*scale_state);
  });
}

// BM_unscale_device_state's step captured once in a CUDA graph on a framework stream (through a
// StreamGuard, after a warm-up call that uploads the list's table) and replayed: what a framework
// that graphs its training step runs, with no host work per tensor.
void BM_unscale_device_state_graph(benchmark::State& state) {
  const auto list = MakeList(state, DtypeOf(state.range(1)));
  const DeviceScalingBackend& backend = cuda::Backend();
  const ScalePolicy policy{.InitialScale = 1.0f};
  auto scale_state = backend.CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  cudaStream_t stream = nullptr;
  if (!Check(state, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) {
    return;
  }
  cudaGraphExec_t exec = nullptr;
  {
    const cuda::StreamGuard guard(stream, 0);
    const auto step = [&] {
      WritePass(list, {}, {.State = scale_state.get()});
      backend.UpdateScale(*scale_state);
    };
    cudaGraph_t graph = nullptr;
    try {
      step();
      if (Check(state, cudaStreamSynchronize(stream), "cudaStreamSynchronize") &&
          Check(state, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
        step();
        if (Check(state, cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture")) {
          Check(state, cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        }
      }
    } catch (const std::exception& error) {
      cudaGraph_t abandoned = nullptr;
      cudaStreamEndCapture(stream, &abandoned);
      if (abandoned != nullptr) {
        cudaGraphDestroy(abandoned);
      }
      state.SkipWithError((std::string("capture: ") + error.what()).c_str());
    }
    if (graph != nullptr) {
      cudaGraphDestroy(graph);
    }
  }
  if (exec != nullptr) {
    TimeOnStream(state, stream, 2 * Bytes(list),
                 [&] { Check(state, cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); });
    cudaGraphExecDestroy(exec);
  }
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

// Lists over one device buffer of the layout's tensors, each tensor wrapped anew (cuda::Wrap)
// in every list, as a framework that owns its tensors hands them over each step. List k
// starts at tensor k * rotate: with rotate 0 every list is the same memory in the same order.
struct WrappedLists {
  void* memory = nullptr;
  std::vector<std::vector<TensorPtr>> lists;

  WrappedLists(benchmark::State& state, DataType dtype, std::size_t copies, std::size_t rotate) {
    const Layout layout = LayoutOf(state.range(0));
    const std::size_t bytes = layout.elements * ElementSize(dtype);
    if (!Check(state, cudaMalloc(&memory, layout.tensors * bytes), "cudaMalloc") ||
        !Check(state, cudaMemset(memory, 0, layout.tensors * bytes), "cudaMemset")) {
      return;
    }
    for (std::size_t k = 0; k < copies; ++k) {
      std::vector<TensorPtr>& list = lists.emplace_back();
      for (std::size_t i = 0; i < layout.tensors; ++i) {
        const std::size_t t = (i + k * rotate) % layout.tensors;
        list.push_back(
            cuda::Wrap(static_cast<std::byte*>(memory) + t * bytes, Shape{layout.elements}, dtype, 0, nullptr));
      }
    }
  }
  ~WrappedLists() {
    lists.clear();
    cudaFree(memory);
  }
  WrappedLists(const WrappedLists&) = delete;
  WrappedLists& operator=(const WrappedLists&) = delete;
};

// The unscale with a device state on lists of new TensorPtr objects each call over memory passed before
// (rotate 0: the backend finds the list's uploaded table) or in an order not seen for 16
// calls (rotate 1: more lists than the backend keeps tables for, so every call uploads).
void UnscaleWrapped(benchmark::State& state, std::size_t copies, std::size_t rotate) {
  const DataType dtype = DtypeOf(state.range(1));
  const WrappedLists wrapped(state, dtype, copies, rotate);
  if (wrapped.lists.size() != copies) {
    return;
  }
  const DeviceScalingBackend& backend = cuda::Backend();
  const ScalePolicy policy{.InitialScale = 1.0f};
  auto scale_state = backend.CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  const Layout layout = LayoutOf(state.range(0));
  std::size_t call = 0;
  TimeOnDevice(state, 2 * layout.tensors * layout.elements * ElementSize(dtype), [&] {
    WritePass(wrapped.lists[call++ % copies], {}, {.State = scale_state.get()});
    backend.UpdateScale(*scale_state);
  });
}

void BM_unscale_rewrapped_same_memory(benchmark::State& state) { UnscaleWrapped(state, 2, 0); }

void BM_unscale_rewrapped_new_order(benchmark::State& state) { UnscaleWrapped(state, 16, 1); }

void BM_has_non_finite(benchmark::State& state) {
  const auto list = MakeList(state, DtypeOf(state.range(1)));
  TimeOnDevice(state, Bytes(list), [&] { benchmark::DoNotOptimize(HasNonFinite(list)); });
}

void BM_check_and_sum_squares(benchmark::State& state) {
  const auto list = MakeList(state, DtypeOf(state.range(1)));
  TimeOnDevice(state, Bytes(list), [&] { benchmark::DoNotOptimize(CheckAndSumSquares(list, 1.0f)); });
}

void BM_scale(benchmark::State& state) {
  const auto list = MakeList(state, DtypeOf(state.range(1)));
  TimeOnDevice(state, 2 * Bytes(list), [&] { ScaleInPlace(list, 1.0f); });
}

// Cast to the other dtype (FP32 -> FP16, FP16 -> FP32) with a fused scale and check.
void BM_cast_scaled(benchmark::State& state) {
  const DataType dtype = DtypeOf(state.range(1));
  const DataType target = dtype == DataType::Float16 ? DataType::Float32 : DataType::Float16;
  const auto src = MakeList(state, dtype);
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& t : src) {
    dst.push_back(Zeros(t->GetShape(), target, kGpu));
  }
  TimeOnDevice(state, Bytes(src) + Bytes(dst), [&] { benchmark::DoNotOptimize(CastInto(src, dst, 0.5f)); });
}

// One fused AdamW step over FP32 parameters, gradients and moments (fp16:1 also writes an FP16
// copy of each parameter): reads 16 bytes and writes 12 (+2) per element.
void BM_fused_adam(benchmark::State& state) {
  const auto parameters = MakeList(state, DataType::Float32);
  const auto gradients = MakeList(state, DataType::Float32);
  const auto first = MakeList(state, DataType::Float32);
  const auto second = MakeList(state, DataType::Float32);
  std::vector<TensorPtr> copies;
  if (state.range(1) == 1) {
    copies = MakeList(state, DataType::Float16);
  }
  const OptimizerStepLists lists{.Parameters = parameters,
                                 .Gradients = gradients,
                                 .FirstState = first,
                                 .SecondState = second,
                                 .LowPrecisionCopies = copies};
  const AdamStepScalars scalars = optimizers::AdamStepScalarsFor(optimizers::AdamOptions::AdamW(1e-3, 1e-2), 10);
  TimeOnDevice(state, 2 * Bytes(parameters) + Bytes(gradients) + 2 * Bytes(first) + 2 * Bytes(second) + Bytes(copies),
               [&] { benchmark::DoNotOptimize(optimizers::FusedAdamStep(lists, scalars)); });
}

// The low-bit AdamW steps (LowBitSteps.cu) by mode: 0 BF16 moments; 1 Int8Block/UInt8Block
// moments (blocks of 256); 2 Float8E4M3Block moments; 3 8-bit moments and BF16 masters rounded
// stochastically; 4 8-bit moments and BF16 masters with 16-bit remainders.
struct LowBitMode {
  StateFormat first;
  StateFormat second;
  MasterFormat masters;
  std::size_t reads;   // bytes per element (the scales, 8 bytes per 256 elements, not counted)
  std::size_t writes;  // bytes per element
};

LowBitMode LowBitModeOf(std::int64_t mode) {
  constexpr StateFormat kInt8 = StateFormat::Int8Block;
  constexpr StateFormat kUInt8 = StateFormat::UInt8Block;
  switch (mode) {
    case 0:
      return {StateFormat::BFloat16, StateFormat::BFloat16, MasterFormat::Float32, 12, 8};
    case 1:
      return {kInt8, kUInt8, MasterFormat::Float32, 10, 6};
    case 2:
      return {StateFormat::Float8E4M3Block, StateFormat::Float8E4M3Block, MasterFormat::Float32, 10, 6};
    case 3:
      return {kInt8, kUInt8, MasterFormat::BFloat16StochasticRounding, 8, 4};
    default:
      return {kInt8, kUInt8, MasterFormat::BFloat16Remainder, 10, 6};
  }
}

// Per tensor of @p list, a zero tensor of @p dtype with StateBlockCount() elements when
// @p scales, else as many elements.
std::vector<TensorPtr> StateList(const std::vector<TensorPtr>& list, DataType dtype, bool scales) {
  std::vector<TensorPtr> out;
  out.reserve(list.size());
  for (const TensorPtr& t : list) {
    out.push_back(Zeros({scales ? StateBlockCount(t->Size(), kDefaultStateBlockSize) : t->Size()}, dtype, kGpu));
  }
  return out;
}

void BM_fused_adam_low_bit(benchmark::State& state) {
  const LowBitMode mode = LowBitModeOf(state.range(1));
  const auto parameters =
      MakeList(state, mode.masters == MasterFormat::Float32 ? DataType::Float32 : DataType::BFloat16);
  const auto gradients = MakeList(state, DataType::Float32);
  const auto first = StateList(parameters, StateStorageDType(mode.first), false);
  const auto second = StateList(parameters, StateStorageDType(mode.second), false);
  const std::vector<TensorPtr> none;
  const auto first_scales = IsBlockScaled(mode.first) ? StateList(parameters, DataType::Float32, true) : none;
  const auto second_scales = IsBlockScaled(mode.second) ? StateList(parameters, DataType::Float32, true) : none;
  const auto remainders =
      mode.masters == MasterFormat::BFloat16Remainder ? StateList(parameters, DataType::BFloat16, false) : none;
  const OptimizerStepLists lists{.Parameters = parameters,
                                 .Gradients = gradients,
                                 .FirstState = first,
                                 .SecondState = second,
                                 .FirstStateFormat = mode.first,
                                 .SecondStateFormat = mode.second,
                                 .FirstStateScales = first_scales,
                                 .SecondStateScales = second_scales,
                                 .Masters = mode.masters,
                                 .ParameterRemainders = remainders,
                                 .RoundingSeed = 1,
                                 .RoundingStep = 10};
  const AdamStepScalars scalars = optimizers::AdamStepScalarsFor(optimizers::AdamOptions::AdamW(1e-3, 1e-2), 10);
  TimeOnDevice(state, TrafficOf(state, mode.reads, mode.writes),
               [&] { benchmark::DoNotOptimize(optimizers::FusedAdamStep(lists, scalars)); });
}

// The scaled saturating cast to FP8 E4M3 with each tensor's amax, from FP32 (fp16:0) or FP16.
void BM_fp8_cast_amax(benchmark::State& state) {
  const auto src = MakeList(state, DtypeOf(state.range(1)));
  std::vector<TensorPtr> dst;
  dst.reserve(src.size());
  for (const TensorPtr& t : src) {
    dst.push_back(Zeros(t->GetShape(), DataType::Float8E4M3FN, kGpu));
  }
  const TensorPtr scale = FromVector(std::vector<float>(src.size(), 2.0f), {src.size()}, DataType::Float32, kGpu);
  const TensorPtr amax = Zeros({src.size()}, DataType::Float32, kGpu);
  TimeOnDevice(state, Bytes(src) + Bytes(dst), [&] { ScaledCastToFloat8(src, dst, scale, amax); });
}

// The FP8 gradient wire's kernels (TensorBackend::EncodeFloat8Blocks, DecodeSumFloat8Blocks)
// as a reduce-scatter of 2^26 FP32 values over `parts` ranks runs them: the encoder reads every
// value once and writes its code and block scales; the receiver reads `parts` parts of 2^26 /
// parts codes with their scales and writes the FP32 sums.
constexpr std::size_t kWireValues = std::size_t{1} << 26;

std::size_t WireBlocks(std::size_t count) {
  return (count + distributed::kFloat8WireBlock - 1) / distributed::kFloat8WireBlock;
}

std::size_t WireEncodeTraffic(std::size_t parts) {
  return (kWireValues * (4 + 1)) + (parts * WireBlocks(kWireValues / parts) * 4);
}

std::size_t WireDecodeSumTraffic(std::size_t parts) {
  const std::size_t count = kWireValues / parts;
  return kWireValues + (parts * WireBlocks(count) * 4) + (count * 4);
}

void BM_fp8_wire_encode(benchmark::State& state) {
  const auto parts = static_cast<std::size_t>(state.range(0));
  const std::size_t count = kWireValues / parts;
  const TensorPtr values = FromVector(std::vector<float>(kWireValues, 0.3f), {kWireValues}, DataType::Float32, kGpu);
  const TensorPtr codes = Zeros({kWireValues}, DataType::Float8E4M3FN, kGpu);
  const TensorPtr scales = Zeros({parts * WireBlocks(count)}, DataType::Float32, kGpu);
  const Float8BlockRuns runs{.Runs = parts, .Length = count, .Offset = 0, .Stride = count};
  TimeOnDevice(state, WireEncodeTraffic(parts),
               [&] { values->Backend()->EncodeFloat8Blocks(*values, runs, *codes, *scales); });
}

void BM_fp8_wire_decode_sum(benchmark::State& state) {
  const auto parts = static_cast<std::size_t>(state.range(0));
  const std::size_t count = kWireValues / parts;
  const TensorPtr codes =
      FromVector(std::vector<float>(kWireValues, 0.5f), {kWireValues}, DataType::Float8E4M3FN, kGpu);
  const TensorPtr scales = FromVector(std::vector<float>(parts * WireBlocks(count), 0.25f), {parts * WireBlocks(count)},
                                      DataType::Float32, kGpu);
  const TensorPtr out = Zeros({count}, DataType::Float32, kGpu);
  TimeOnDevice(state, WireDecodeSumTraffic(parts),
               [&] { out->Backend()->DecodeSumFloat8Blocks(*codes, *scales, parts, count, *out, 0); });
}

void BM_copy_fp8_wire_encode(benchmark::State& state) {
  CopyOfTraffic(state, WireEncodeTraffic(static_cast<std::size_t>(state.range(0))));
}

void BM_copy_fp8_wire_decode_sum(benchmark::State& state) {
  CopyOfTraffic(state, WireDecodeSumTraffic(static_cast<std::size_t>(state.range(0))));
}

void WireArguments(benchmark::internal::Benchmark* b) {
  for (const std::int64_t parts : {2, 8}) {
    b->Args({parts});
  }
  b->ArgNames({"parts"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void BM_copy_read_write(benchmark::State& state) {
  CopyOfTraffic(state, TrafficOf(state, ElementSize(DtypeOf(state.range(1))), ElementSize(DtypeOf(state.range(1)))));
}

void BM_copy_read_only(benchmark::State& state) {
  CopyOfTraffic(state, TrafficOf(state, ElementSize(DtypeOf(state.range(1))), 0));
}

void BM_copy_cast(benchmark::State& state) {
  CopyOfTraffic(state, TrafficOf(state, 4, 2));  // FP32 <-> FP16 moves 6 bytes per element either way
}

void BM_copy_adam(benchmark::State& state) {
  CopyOfTraffic(state, TrafficOf(state, 16, state.range(1) == 1 ? 14 : 12));
}

void BM_copy_adam_low_bit(benchmark::State& state) {
  const LowBitMode mode = LowBitModeOf(state.range(1));
  CopyOfTraffic(state, TrafficOf(state, mode.reads, mode.writes));
}

void BM_copy_fp8(benchmark::State& state) {
  CopyOfTraffic(state, TrafficOf(state, ElementSize(DtypeOf(state.range(1))), 1));
}

void Arguments(benchmark::internal::Benchmark* b) {
  for (const std::int64_t layout : {0, 1, 2}) {
    for (const std::int64_t dtype : {0, 1}) {
      b->Args({layout, dtype});
    }
  }
  b->ArgNames({"layout", "fp16"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// The many-tensor layouts only: the cases where the table is large enough to be uploaded.
void ManyTensorArguments(benchmark::internal::Benchmark* b) {
  for (const std::int64_t layout : {1, 2}) {
    for (const std::int64_t dtype : {0, 1}) {
      b->Args({layout, dtype});
    }
  }
  b->ArgNames({"layout", "fp16"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// The low-bit optimizer modes (LowBitModeOf()) on every layout.
void LowBitArguments(benchmark::internal::Benchmark* b) {
  for (const std::int64_t layout : {0, 1, 2}) {
    for (const std::int64_t mode : {0, 1, 2, 3, 4}) {
      b->Args({layout, mode});
    }
  }
  b->ArgNames({"layout", "mode"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_copy_read_write)->Apply(Arguments);
BENCHMARK(BM_unscale_and_check)->Apply(Arguments);
BENCHMARK(BM_unscale_device_state)->Apply(Arguments);
BENCHMARK(BM_unscale_device_state_graph)->Apply(Arguments);
BENCHMARK(BM_unscale_rewrapped_same_memory)->Apply(ManyTensorArguments);
BENCHMARK(BM_unscale_rewrapped_new_order)->Apply(ManyTensorArguments);
BENCHMARK(BM_scale)->Apply(Arguments);
BENCHMARK(BM_copy_read_only)->Apply(Arguments);
BENCHMARK(BM_has_non_finite)->Apply(Arguments);
BENCHMARK(BM_check_and_sum_squares)->Apply(Arguments);
BENCHMARK(BM_copy_cast)->Apply(Arguments);
BENCHMARK(BM_cast_scaled)->Apply(Arguments);
BENCHMARK(BM_copy_adam)->Apply(Arguments);
BENCHMARK(BM_fused_adam)->Apply(Arguments);
BENCHMARK(BM_copy_adam_low_bit)->Apply(LowBitArguments);
BENCHMARK(BM_fused_adam_low_bit)->Apply(LowBitArguments);
BENCHMARK(BM_copy_fp8)->Apply(Arguments);
BENCHMARK(BM_fp8_cast_amax)->Apply(Arguments);
BENCHMARK(BM_copy_fp8_wire_encode)->Apply(WireArguments);
BENCHMARK(BM_fp8_wire_encode)->Apply(WireArguments);
BENCHMARK(BM_copy_fp8_wire_decode_sum)->Apply(WireArguments);
BENCHMARK(BM_fp8_wire_decode_sum)->Apply(WireArguments);

int main(int argc, char** argv) {
  if (!cuda::IsAvailable()) {
    std::printf("no CUDA device: %s\n", cuda::UnavailableReason().c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cuda_device", cuda::DeviceName(0));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
