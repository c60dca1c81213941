// CPU fused multi-tensor kernels against the limit kernels, in one run.
//
// Cases: each fused operation at 1M, 16M and 64M elements, laid out as
//   gpt   ~100 tensors of mixed sizes (8 transformer layers plus embeddings),
//   small tensors of 1K-4K elements (about 6,500 at 16M, 26,000 at 64M), each allocated
//         on its own (FromVector), so other memory lies between them,
//   packed the same tensors back to back in one buffer (ZerosContiguous), as a framework's
//         contiguous gradient buffer holds them,
//   reversed the small layout's tensors allocated last to first, as a backward pass allocates
//         gradients against the order of the parameter list (mostly descending addresses),
//   flat  one tensor.
// Limit kernels (FP32, one flat buffer, threaded the same way: OpenMP static
// over 32K-element chunks): read-only sum, in-place scale, copy (memcpy); and the
// same three plain loops over the memory of the small, packed and reversed lists themselves
// (limit/{read_sum,scale,copy}/{f32,f16}/{small,packed,reversed}/N), which show what a layout costs
// a loop that does nothing but move the bytes.
// Every case reports bytes/second (SetBytesProcessed: bytes read plus bytes
// written); benchmarks/ratios.py turns a JSON run into the target ratios.
// pair/<op>/<dtype>/<layout>/N (16M and 64M) time the fused call, its flat limit kernel, the same
// plain loop over the call's own memory and the call on the flat list in one iteration, each from
// memory, and report their ratios as counters (RegisterPaired; ratios.py --pairs).
// With libtorch found, benchmarks/torch/MultiTensorTorch.cpp adds what a
// libtorch user would write to this same binary.
//
// Run: OMP_NUM_THREADS=2 bench_multi_tensor --benchmark_format=json --benchmark_out=cpu.json
// Add --mlfw_timing=cpu (and OMP_WAIT_POLICY=passive) to time by process CPU time on a busy machine.
#include "bench_multi_tensor.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/mlframework.hpp>

namespace mlfw_bench {

using mlframework::DataType;
using mlframework::TensorPtr;

std::vector<std::size_t> LayoutSizes(Layout layout, std::size_t total) {
  std::vector<std::size_t> sizes;
  switch (layout) {
    case Layout::Flat:
      sizes.push_back(total);
      break;
    case Layout::Small:
    case Layout::Packed:
    case Layout::Reversed: {
      // The same generator as compare_pytorch.py, so both measure identical lists.
      std::uint64_t state = 42;
      std::size_t sum = 0;
      while (sum < total) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const std::size_t size = std::min<std::size_t>(1024 + (state >> 33) % 3073, total - sum);
        sizes.push_back(size);
        sum += size;
      }
      break;
    }
    case Layout::Gpt: {
      // 8 layers of (ln1 w,b, qkv w,b, proj w,b, ln2 w,b, fc w,b, fc_proj w,b), 12 tensors each,
      // plus token and position embeddings and the final layer norm: 100 tensors. Width d
      // puts about half of the elements in the layers; the token embedding takes the rest.
      std::size_t d = 16;
      while (std::size_t{96} * (d + 16) * (d + 16) <= total / 2) {
        d += 16;
      }
      const std::size_t positions = std::min<std::size_t>(1024, total / (8 * d));
      std::size_t layers = 0;
      std::vector<std::size_t> body;
      for (int l = 0; l < 8; ++l) {
        for (const std::size_t s : {d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d}) {
          body.push_back(s);
          layers += s;
        }
      }
      sizes.push_back(total - layers - positions * d - 2 * d);  // token embedding
      sizes.push_back(positions * d);
      sizes.insert(sizes.end(), body.begin(), body.end());
      sizes.push_back(d);
      sizes.push_back(d);
      break;
    }
  }
  return sizes;
}

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::Gpt:
      return "gpt";
    case Layout::Small:
      return "small";
    case Layout::Packed:
      return "packed";
    case Layout::Reversed:
      return "reversed";
    case Layout::Flat:
      break;
  }
  return "flat";
}

const char* DtypeName(DataType dtype) {
  switch (dtype) {
    case DataType::Float16:
      return "f16";
    case DataType::BFloat16:
      return "bf16";
    case DataType::Float8E4M3FN:
      return "f8e4m3";
    case DataType::Float8E5M2:
      return "f8e5m2";
    case DataType::Float32:
      break;
  }
  return "f32";
}

namespace {
bool g_cpu_timing = false;
}  // namespace

void ApplyTiming(benchmark::internal::Benchmark* benchmark) {
  if (g_cpu_timing) {
    benchmark->MeasureProcessCPUTime();
  } else {
    benchmark->UseRealTime();
  }
}

bool ParseTimingFlag(int& argc, char** argv) {
  const std::string flag = "--mlfw_timing=";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(flag, 0) != 0) {
      continue;
    }
    const std::string value = arg.substr(flag.size());
    if (value != "cpu" && value != "real") {
      return false;
    }
    g_cpu_timing = value == "cpu";
    for (int j = i; j + 1 < argc; ++j) {
      argv[j] = argv[j + 1];
    }
    --argc;
    break;
  }
  return true;
}

std::string SizeName(std::size_t elements) {
  return elements % (std::size_t{1} << 20) == 0 ? std::to_string(elements >> 20) + "M"
                                                : std::to_string(elements >> 10) + "K";
}

namespace {

// Lists are built once per (layout, size, dtype) and kept while the benchmarks of that
// layout and size run; registration order groups them, so memory stays bounded. Flat lists are
// kept apart, while cases of their size run: a paired case holds its layout's list and the flat
// one of the same size at once.
using ListKey = std::tuple<int, std::size_t, int, bool>;
std::map<ListKey, std::vector<TensorPtr>> g_lists;
std::pair<int, std::size_t> g_lists_key{-1, 0};
std::map<ListKey, std::vector<TensorPtr>> g_flat_lists;
std::size_t g_flat_total = 0;

}  // namespace

const std::vector<TensorPtr>& List(Layout layout, std::size_t total, DataType dtype, bool fill) {
  const ListKey key{static_cast<int>(layout), total, static_cast<int>(dtype), fill};
  if (layout == Layout::Flat && g_flat_total != total) {
    g_flat_lists.clear();
    g_flat_total = total;
  }
  if (layout != Layout::Flat && g_lists_key != std::pair<int, std::size_t>{static_cast<int>(layout), total}) {
    g_lists.clear();
    g_lists_key = {static_cast<int>(layout), total};
  }
  auto& list = layout == Layout::Flat ? g_flat_lists[key] : g_lists[key];
  if (list.empty()) {
    const std::vector<std::size_t> sizes = LayoutSizes(layout, total);
    std::vector<mlframework::Shape> shapes;
    shapes.reserve(sizes.size());
    for (const std::size_t size : sizes) {
      shapes.push_back({size});
    }
    if (layout == Layout::Packed) {
      list = mlframework::ZerosContiguous(shapes, dtype);
    }
    std::uint64_t state = 7;
    // The reversed layout allocates its tensors last to first, as a backward pass does.
    const bool reversed = layout == Layout::Reversed;
    for (std::size_t n = 0; n < sizes.size(); ++n) {
      const std::size_t i = reversed ? sizes.size() - 1 - n : n;
      std::vector<float> values(sizes[i]);
      if (fill) {
        for (float& v : values) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          v = static_cast<float>(static_cast<double>(state >> 40) * 0x1.0p-23 - 1.0);  // [-1, 1)
        }
      }
      if (layout == Layout::Packed) {
        list[i]->CopyFromFloats(values);
      } else {
        list.push_back(mlframework::FromVector(values, shapes[i], dtype));
      }
    }
    if (reversed) {
      std::reverse(list.begin(), list.end());
    }
  }
  return list;
}

std::size_t Bytes(const std::vector<TensorPtr>& list) {
  std::size_t bytes = 0;
  for (const auto& t : list) {
    bytes += t->Size() * mlframework::ElementSize(t->GetDataType());
  }
  return bytes;
}

}  // namespace mlfw_bench

namespace {

using namespace mlfw_bench;
using mlframework::DataType;

constexpr std::size_t kSizes[] = {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20};
constexpr DataType kDtypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};
constexpr std::size_t kChunk = 32768;  // the CPU backend's chunk (MultiTensorKernels.hpp)

// ---- limit kernels: plain loops over one FP32 buffer, chunked and threaded like the backend ----

#if defined(__x86_64__) && defined(__GNUC__)
#define MLFW_BENCH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLFW_BENCH_CLONES
#endif

MLFW_BENCH_CLONES float ChunkSum(const float* p, std::size_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < n; ++i) {
    sum += p[i];
  }
  return sum;
}

MLFW_BENCH_CLONES void ChunkScale(float* p, std::size_t n, float factor) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    p[i] *= factor;
  }
}

double LimitReadSum(const float* p, std::size_t n) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (std::size_t c = 0; c < chunks; ++c) {
    total += ChunkSum(p + c * kChunk, std::min(kChunk, n - c * kChunk));
  }
  return total;
}

void LimitScale(float* p, std::size_t n, float factor) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (std::size_t c = 0; c < chunks; ++c) {
    ChunkScale(p + c * kChunk, std::min(kChunk, n - c * kChunk), factor);
  }
}

void LimitCopy(const float* src, float* dst, std::size_t n) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (std::size_t c = 0; c < chunks; ++c) {
    std::memcpy(dst + c * kChunk, src + c * kChunk, std::min(kChunk, n - c * kChunk) * sizeof(float));
  }
}

// The limit kernels' FP32 buffers (every element 0.5), kept for the whole run, one per size and
// role: paired cases of FP32 and 16-bit operations alternate between sizes, and must not rebuild
// a buffer every time. Each is a library tensor, so its memory is laid out as the fused
// operations' is (2 MiB aligned with huge pages asked for when HugePages() is on).
float* LimitBuffer(std::size_t floats, int which) {
  static std::map<std::pair<std::size_t, int>, TensorPtr> buffers;
  TensorPtr& buffer = buffers[{floats, which}];
  if (!buffer) {
    buffer = mlframework::Zeros({floats}, DataType::Float32);
    auto* p = static_cast<float*>(mlframework::backends::cpu::MutableData(*buffer));
    std::fill(p, p + floats, 0.5f);
  }
  return static_cast<float*>(mlframework::backends::cpu::MutableData(*buffer));
}

// One call of a fused operation on a layout's lists, and the bytes it reads plus writes.
// In-place calls scale by 0.5 and 2 in turn (exact, so values stay put); `settle`, run after the
// timed loop, makes one more call when the loop made an odd number. Without it a case of odd
// iterations leaves its list halved for the next case: over a run FP16 values drifted down into
// the subnormal range, where the 16-bit word path falls back to the float path, and the FP16
// scale cases slowed 2-3x from one repetition to the next (measured on a 2-vCPU EPYC).
struct BoundCall {
  std::function<void()> call;
  std::size_t bytes = 0;
  std::function<void()> settle = [] {};
  const std::vector<TensorPtr>* list = nullptr;  // the list it reads (and writes), casts: none
};

// A call that scales by *factor and then flips it between 0.5 and 2, with its settle.
template <typename Fn>
BoundCall Alternating(Fn scale_by, std::size_t bytes) {
  auto factor = std::make_shared<float>(0.5f);
  std::function<void()> call = [scale_by, factor] {
    scale_by(*factor);
    *factor = 1.0f / *factor;
  };
  return {call, bytes, [call, factor] {
            if (*factor != 0.5f) {
              call();
            }
          }};
}

// One call of the flat FP32 limit kernel `name` over `floats` floats, and the bytes it moves.
BoundCall BindLimit(const std::string& name, std::size_t floats) {
  float* p = LimitBuffer(floats, 0);
  if (name == "read_sum") {
    return {[p, floats] { benchmark::DoNotOptimize(LimitReadSum(p, floats)); }, floats * 4};
  }
  if (name == "scale") {
    return Alternating(
        [p, floats](float factor) {
          LimitScale(p, floats, factor);
          benchmark::ClobberMemory();
        },
        floats * 8);
  }
  float* dst = LimitBuffer(floats, 1);
  return {[p, dst, floats] {
            LimitCopy(p, dst, floats);
            benchmark::ClobberMemory();
          },
          floats * 8};
}

void RegisterLimits(std::size_t floats) {
  for (const char* name : {"read_sum", "scale", "copy"}) {
    const std::string case_name = std::string("limit/") + name + "/f32/flat/" + SizeName(floats);
    benchmark::RegisterBenchmark(case_name.c_str(), [name, floats](benchmark::State& state) {
      const BoundCall limit = BindLimit(name, floats);
      for (auto _ : state) {
        limit.call();
      }
      limit.settle();
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * limit.bytes));
    })->Apply(ApplyTiming);
  }
}

// The limit loops over the memory of a layout's tensors, wherever they lie: each tensor's bytes
// taken as 32-bit words (16-bit lists: half as many), tensors shared out to the threads in equal
// runs, no software prefetch. Against the flat limit kernels over the same number of bytes they
// show what the layout itself costs a plain loop; against the fused operations on the same list,
// what the kernels add to that.
MLFW_BENCH_CLONES void ChunkFlipSigns(std::uint32_t* p, std::size_t n) {
  // In place read-modify-write like ChunkScale, in integers: a 16-bit list read as FP32 holds
  // subnormals, and a multiply by 0.5 would change them and can take microcode assists.
  constexpr std::uint32_t kSigns = 0x80008000u;  // the sign bit of every 16-bit word (and of FP32)
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    p[i] ^= kSigns;
  }
}

template <typename Fn>
void ForEachTensorBytes(const std::vector<TensorPtr>& list, const Fn& fn) {
  const auto count = static_cast<std::int64_t>(list.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const mlframework::ITensor& tensor = *list[static_cast<std::size_t>(i)];
    fn(static_cast<std::size_t>(i), tensor.Size() * mlframework::ElementSize(tensor.GetDataType()));
  }
}

double LayoutReadSum(const std::vector<TensorPtr>& list) {
  const auto count = static_cast<std::int64_t>(list.size());
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (std::int64_t i = 0; i < count; ++i) {
    const mlframework::ITensor& tensor = *list[static_cast<std::size_t>(i)];
    const std::size_t bytes = tensor.Size() * mlframework::ElementSize(tensor.GetDataType());
    total += ChunkSum(static_cast<const float*>(mlframework::backends::cpu::Data(tensor)), bytes / sizeof(float));
  }
  return total;
}

void LayoutFlipSigns(const std::vector<TensorPtr>& list) {
  ForEachTensorBytes(list, [&](std::size_t i, std::size_t bytes) {
    ChunkFlipSigns(static_cast<std::uint32_t*>(mlframework::backends::cpu::MutableData(*list[i])), bytes / 4);
  });
}

void LayoutCopy(const std::vector<TensorPtr>& src, const std::vector<TensorPtr>& dst) {
  ForEachTensorBytes(src, [&](std::size_t i, std::size_t bytes) {
    std::memcpy(mlframework::backends::cpu::MutableData(*dst[i]), mlframework::backends::cpu::Data(*src[i]), bytes);
  });
}

// limit/{read_sum,scale,copy}/{f32,f16}/{small,packed}/N: read_sum and scale (sign flips, see
// ChunkFlipSigns) over the list's memory, copy from it into a second list of the same layout.
void RegisterLayoutLimits(Layout layout, std::size_t total) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    const std::string tail = std::string("/") + DtypeName(dtype) + "/" + LayoutName(layout) + "/" + SizeName(total);
    benchmark::RegisterBenchmark(("limit/read_sum" + tail).c_str(), [=](benchmark::State& state) {
      const auto& list = List(layout, total, dtype);
      for (auto _ : state) {
        benchmark::DoNotOptimize(LayoutReadSum(list));
      }
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * Bytes(list)));
    })->Apply(ApplyTiming);
    benchmark::RegisterBenchmark(("limit/scale" + tail).c_str(), [=](benchmark::State& state) {
      const auto& list = List(layout, total, dtype);
      for (auto _ : state) {
        LayoutFlipSigns(list);
        benchmark::ClobberMemory();
      }
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * Bytes(list)));
    })->Apply(ApplyTiming);
    benchmark::RegisterBenchmark(("limit/copy" + tail).c_str(), [=](benchmark::State& state) {
      const auto& src = List(layout, total, dtype);
      const auto& dst = List(layout, total, dtype, /*fill=*/false);
      for (auto _ : state) {
        LayoutCopy(src, dst);
        benchmark::ClobberMemory();
      }
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * Bytes(src)));
    })->Apply(ApplyTiming);
  }
}

// ---- the fused operations through the public API -----------------------------------------------

// A fused operation, named "<op>/<dtype>" ("cast/<from>_to_<to>" for casts), with the flat FP32
// limit kernel it is held against: `limit` over total * width / 4 floats, as many bytes per array
// as the operation's (`width`: its element size; a cast's wider side).
struct FusedOp {
  std::string name;
  std::string limit;
  std::size_t width = 4;
  std::function<BoundCall(Layout, std::size_t)> bind;
};

// The call, noting the list it reads (and writes), for the plain loop over the same memory.
BoundCall WithList(BoundCall call, const std::vector<TensorPtr>& list) {
  call.list = &list;
  return call;
}

std::vector<FusedOp> FusedOps() {
  std::vector<FusedOp> ops;
  for (const DataType dtype : kDtypes) {
    const std::string d = DtypeName(dtype);
    const std::size_t width = mlframework::ElementSize(dtype);
    ops.push_back({"unscale_check/" + d, "scale", width, [dtype](Layout layout, std::size_t total) {
                     const auto& list = List(layout, total, dtype);
                     return WithList(Alternating(
                                         [&list](float factor) {
                                           benchmark::DoNotOptimize(mlframework::UnscaleAndCheck(list, factor));
                                         },
                                         2 * Bytes(list)),
                                     list);
                   }});
    ops.push_back(
        {"check/" + d, "read_sum", width, [dtype](Layout layout, std::size_t total) {
           const auto& list = List(layout, total, dtype);
           return WithList({[&list] { benchmark::DoNotOptimize(mlframework::HasNonFinite(list)); }, Bytes(list)}, list);
         }});
    ops.push_back({"sum_squares/" + d, "read_sum", width, [dtype](Layout layout, std::size_t total) {
                     const auto& list = List(layout, total, dtype);
                     return WithList(
                         {[&list] { benchmark::DoNotOptimize(mlframework::CheckAndSumSquares(list, 1.0f / 65536.0f)); },
                          Bytes(list)},
                         list);
                   }});
    ops.push_back({"scale/" + d, "scale", width, [dtype](Layout layout, std::size_t total) {
                     const auto& list = List(layout, total, dtype);
                     return WithList(Alternating(
                                         [&list](float factor) {
                                           mlframework::ScaleInPlace(list, factor);
                                           benchmark::ClobberMemory();
                                         },
                                         2 * Bytes(list)),
                                     list);
                   }});
  }
  const std::pair<DataType, DataType> casts[] = {{DataType::Float32, DataType::Float16},
                                                 {DataType::Float32, DataType::BFloat16},
                                                 {DataType::Float16, DataType::Float32},
                                                 {DataType::BFloat16, DataType::Float32}};
  for (const auto& cast : casts) {
    // Plain copies: clang 14 cannot capture structured bindings in the lambda below.
    const DataType from = cast.first;
    const DataType to = cast.second;
    std::string name = "cast/";
    name.append(DtypeName(from)).append("_to_").append(DtypeName(to));
    const std::size_t width = std::max(mlframework::ElementSize(from), mlframework::ElementSize(to));
    ops.push_back({name, "copy", width, [from, to](Layout layout, std::size_t total) {
                     const auto& src = List(layout, total, from);
                     const auto& dst = List(layout, total, to, /*fill=*/false);
                     return BoundCall{
                         [&src, &dst] { benchmark::DoNotOptimize(mlframework::CastInto(src, dst, 1.0f / 65536.0f)); },
                         Bytes(src) + Bytes(dst)};
                   }});
  }
  return ops;
}

// fused/<op>/<dtype>/<layout>/N: the operation alone, as many calls as the benchmark asks.
void RegisterFused(Layout layout, std::size_t total) {
  const std::string tail = std::string("/") + LayoutName(layout) + "/" + SizeName(total);
  for (const FusedOp& op : FusedOps()) {
    benchmark::RegisterBenchmark(("fused/" + op.name + tail).c_str(), [op, layout, total](benchmark::State& state) {
      const BoundCall bound = op.bind(layout, total);
      for (auto _ : state) {
        bound.call();
      }
      bound.settle();
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bound.bytes));
    })->Apply(ApplyTiming);
  }
}

double Seconds(const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The memory of a list's tensors in pieces of at most kChunk FP32 words, in address order (as
// the library visits a list from memory), for plain loops over that same memory.
std::vector<std::pair<void*, std::size_t>> MemoryPieces(const std::vector<TensorPtr>& list) {
  std::vector<std::pair<void*, std::size_t>> pieces;
  for (const auto& tensor : list) {
    auto* first = static_cast<std::byte*>(mlframework::backends::cpu::MutableData(*tensor));
    const std::size_t bytes = tensor->Size() * mlframework::ElementSize(tensor->GetDataType());
    for (std::size_t at = 0; at < bytes; at += kChunk * 4) {
      pieces.emplace_back(first + at, std::min(kChunk * 4, bytes - at));
    }
  }
  std::sort(pieces.begin(), pieces.end());
  return pieces;
}

// One call of the plain loop `name` (read_sum: a sum of the words as FP32; scale: sign flips,
// see ChunkFlipSigns) over the memory of `list`, OpenMP-static over its pieces like the flat
// limit kernels, and the bytes it moves.
BoundCall BindListLoop(const std::string& name, const std::vector<TensorPtr>& list) {
  auto pieces = std::make_shared<const std::vector<std::pair<void*, std::size_t>>>(MemoryPieces(list));
  const auto count = static_cast<std::int64_t>(pieces->size());
  if (name == "read_sum") {
    return {[pieces, count] {
              double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
              for (std::int64_t i = 0; i < count; ++i) {
                const auto& [p, bytes] = (*pieces)[static_cast<std::size_t>(i)];
                total += ChunkSum(static_cast<const float*>(p), bytes / 4);
              }
              benchmark::DoNotOptimize(total);
            },
            Bytes(list)};
  }
  return {[pieces, count] {
#pragma omp parallel for schedule(static)
            for (std::int64_t i = 0; i < count; ++i) {
              const auto& [p, bytes] = (*pieces)[static_cast<std::size_t>(i)];
              ChunkFlipSigns(static_cast<std::uint32_t*>(p), bytes / 4);
            }
            benchmark::ClobberMemory();
          },
          2 * Bytes(list)};
}

double Median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

// Reads a 128 MiB buffer of its own, untimed, so that the next call finds none of its memory in
// the caches (the L3 of the hosts measured: 32 MiB on the EPYC; a 16M-element 16-bit list is
// 32 MiB) and no dirty lines of the previous call to write back.
void EvictCaches() {
  static const std::vector<float> kBuffer(std::size_t{32} << 20, 1.0f);
  benchmark::DoNotOptimize(LimitReadSum(kBuffer.data(), kBuffer.size()));
}

double SecondsFromMemory(const std::function<void()>& call) {
  EvictCaches();
  return Seconds(call);
}

// pair/<op>/<dtype>/<layout>/N: the fused operation against its flat limit kernel and, but for
// casts, against the same plain loop over the very memory the operation works on. Separate
// cases each take the host's bandwidth in their own seconds, and a shared host's bandwidth moves
// from one minute to the next (the flat limit loops by up to 1.7x on a 2-vCPU EPYC); calls a few
// milliseconds apart share it. And two buffers of the same size read at speeds up to 20% apart in
// one process, depending on where their pages lie; a loop over the same memory takes that out.
// Each iteration times fused, limit and loop, each after an untimed read of other memory that
// empties the caches (EvictCaches): a call right after another over its own memory would find
// part of a 16M-element list still in the L3. The iteration time is the fused call's; the
// counters are medians over the iterations of the fused call's bandwidth over the limit call's
// (limit_ratio) and over the loop's (loop_ratio), and, for the layouts other than flat, of its
// time over the same operation's on the flat list of the same size, timed in the same iteration
// (over_flat).
void RegisterPaired(Layout layout, std::size_t total) {
  const std::string tail = std::string("/") + LayoutName(layout) + "/" + SizeName(total);
  for (const FusedOp& op : FusedOps()) {
    benchmark::RegisterBenchmark(("pair/" + op.name + tail).c_str(), [op, layout, total](benchmark::State& state) {
      const BoundCall fused = op.bind(layout, total);
      const BoundCall limit = BindLimit(op.limit, total * op.width / 4);
      const BoundCall loop = fused.list != nullptr ? BindListLoop(op.limit, *fused.list) : BoundCall{};
      const BoundCall flat = layout != Layout::Flat ? op.bind(Layout::Flat, total) : BoundCall{};
      std::vector<double> limit_ratios;
      std::vector<double> loop_ratios;
      std::vector<double> over_flat;
      for (auto _ : state) {
        const double fused_s = SecondsFromMemory(fused.call);
        const double limit_s = SecondsFromMemory(limit.call);
        state.SetIterationTime(fused_s);
        const double fused_rate = static_cast<double>(fused.bytes) / fused_s;
        limit_ratios.push_back(fused_rate / (static_cast<double>(limit.bytes) / limit_s));
        if (loop.call) {
          loop_ratios.push_back(fused_rate / (static_cast<double>(loop.bytes) / SecondsFromMemory(loop.call)));
        }
        if (flat.call) {
          over_flat.push_back(fused_s / SecondsFromMemory(flat.call));
        }
      }
      fused.settle();
      limit.settle();
      if (flat.call) {
        flat.settle();
      }
      state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * fused.bytes));
      if (!limit_ratios.empty()) {
        state.counters["limit_ratio"] = Median(limit_ratios);
      }
      if (!loop_ratios.empty()) {
        state.counters["loop_ratio"] = Median(loop_ratios);
      }
      if (!over_flat.empty()) {
        state.counters["over_flat"] = Median(over_flat);
      }
    })->UseManualTime();
  }
}

// threads/<op>/<layout>/N/threads:T: the fused call on T threads (mlframework::SetNumThreads),
// wall clock, at the sizes where one thread and two meet. Run with
// MLFW_PARALLEL_MIN_ELEMENTS=0 to let every size fork, and read where T = 2 starts to beat
// T = 1: that is the library's kParallelMinElements (docs/cpu-backend.md). With the threshold in
// force, the sizes below it run on the calling thread whatever T is.
void RegisterThreadCrossover() {
  const std::vector<std::string> wanted = {"unscale_check/f16", "unscale_check/f32", "check/f16", "cast/f32_to_f16"};
  for (const FusedOp& op : FusedOps()) {
    if (std::find(wanted.begin(), wanted.end(), op.name) == wanted.end()) {
      continue;
    }
    for (const Layout layout : {Layout::Flat, Layout::Small}) {
      for (std::size_t total = std::size_t{1} << 14; total <= (std::size_t{1} << 22); total *= 2) {
        const std::string name = "threads/" + op.name + "/" + LayoutName(layout) + "/" + std::to_string(total);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [op, layout, total](benchmark::State& state) {
              const BoundCall bound = op.bind(layout, total);
              mlframework::SetNumThreads(static_cast<int>(state.range(0)));
              for (auto _ : state) {
                bound.call();
              }
              bound.settle();
              mlframework::SetNumThreads(0);
              state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bound.bytes));
            })
            ->ArgName("threads")
            ->Arg(1)
            ->Arg(2)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!mlfw_bench::ParseTimingFlag(argc, argv)) {
    std::fprintf(stderr, "--mlfw_timing must be cpu or real\n");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::AddCustomContext("mlfw_instruction_set", std::string(mlframework::backends::cpu::InstructionSet()));
  benchmark::AddCustomContext("mlfw_software_prefetch", mlframework::backends::cpu::SoftwarePrefetch() ? "on" : "off");
  benchmark::AddCustomContext("mlfw_small_tensor_pool", mlframework::backends::cpu::SmallTensorPool() ? "on" : "off");
  benchmark::AddCustomContext("mlfw_huge_pages", mlframework::backends::cpu::HugePages() ? "on" : "off");
  benchmark::AddCustomContext("mlfw_omp_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext("mlfw_timing", mlfw_bench::g_cpu_timing ? "process cpu" : "real");
  RegisterThreadCrossover();
  for (const std::size_t total : kSizes) {
    // Limit kernels over the bytes of an FP32 list and of a 16-bit list of this size.
    RegisterLimits(total);
    RegisterLimits(total / 2);
    for (const Layout layout : {Layout::Gpt, Layout::Small, Layout::Packed, Layout::Reversed, Layout::Flat}) {
      RegisterFused(layout, total);
      if (total >= (std::size_t{16} << 20)) {
        RegisterPaired(layout, total);
      }
      if (layout == Layout::Small || layout == Layout::Packed || layout == Layout::Reversed) {
        RegisterLayoutLimits(layout, total);
      }
#if defined(MLFW_BENCH_WITH_TORCH)
      RegisterTorchPeers(layout, total);
#endif
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
