#include "mlframework/backends/cuda/CudaBackend.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/AddInto.cuh"
#include "mlframework/backends/cuda/Cast.cuh"
#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/CudaFloat8Scales.hpp"
#include "mlframework/backends/cuda/CudaOptimizerSteps.hpp"
#include "mlframework/backends/cuda/CudaScaleState.hpp"
#include "mlframework/backends/cuda/CudaTensorImpl.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"
#include "mlframework/backends/cuda/NonFinite.cuh"
#include "mlframework/backends/cuda/Scale.cuh"
#include "mlframework/backends/cuda/ScaleUpdate.cuh"
#include "mlframework/backends/cuda/ScanNonFinite.cuh"
#include "mlframework/backends/cuda/SumSquares.cuh"
#include "mlframework/backends/cuda/Unscale.cuh"
#include "mlframework/core/HostAdd.hpp"

namespace mlframework::backends::cuda {

namespace {

std::int32_t* ResultFlag(DeviceContext& context) {
  return FieldPointer<std::int32_t>(context.DeviceResultBlock(), offsetof(DeviceResult, flag));
}

float* ResultAmax(DeviceContext& context) {
  return FieldPointer<float>(context.DeviceResultBlock(), offsetof(DeviceResult, amax));
}

// ---- lists: the tensors of a call as launch entries, checked before any device work ----

struct DeviceGroup {
  int device;
  std::vector<ListEntry> entries;
};

// CudaTensor is final, so an exact type match is what a dynamic_cast would find, for one
// comparison; GCC's dynamic_cast walks the class hierarchy for every tensor of the list.
template <typename TensorPointer>
const CudaTensor& AsCuda(const TensorPointer& tensor, const char* name, std::size_t index) {
  if (tensor != nullptr && typeid(*tensor) == typeid(CudaTensor)) {
    return static_cast<const CudaTensor&>(*tensor);
  }
  throw ArgumentError(std::string(name) + "[" + std::to_string(index) + "]",
                      "is not a CUDA-backend tensor (device " +
                          (tensor == nullptr ? std::string("null") : tensor->GetDevice().ToString()) + ")");
}

// The group of @p device; a new one reserves room for the @p remaining entries of the list, so
// the usual single group of a long list is filled without reallocating.
DeviceGroup& GroupFor(std::vector<DeviceGroup>& groups, int device, std::size_t remaining) {
  for (DeviceGroup& group : groups) {
    if (group.device == device) {
      return group;
    }
  }
  DeviceGroup& group = groups.emplace_back(DeviceGroup{device, {}});
  group.entries.reserve(remaining);
  return group;
}

// In-place or read-only lists: slot 0 and slot 1 are the same tensor.
template <typename TensorPointer>
std::vector<DeviceGroup> GroupByDevice(std::span<TensorPointer const> tensors) {
  std::vector<DeviceGroup> groups;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const CudaTensor& tensor = AsCuda(tensors[i], "tensors", i);
    GroupFor(groups, tensor.DeviceIndex(), tensors.size() - i)
        .entries.push_back(
            ListEntry{tensor.Data(), tensor.Data(), tensor.GetDataType(), tensor.GetDataType(), tensor.Size()});
  }
  return groups;
}

// Pairs on one GPU grouped by device (slot 0 the source, slot 1 the destination); @p across
// handles a pair whose tensors sit on two GPUs.
template <typename SrcPointer, typename DstPointer, typename Across>
std::vector<DeviceGroup> PairsByDevice(std::span<SrcPointer const> src, std::span<DstPointer const> dst,
                                       Across&& across) {
  std::vector<DeviceGroup> groups;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const CudaTensor& in = AsCuda(src[i], "src", i);
    const CudaTensor& out = AsCuda(dst[i], "dst", i);
    if (in.DeviceIndex() != out.DeviceIndex()) {
      across(in, *dst[i]);
      continue;
    }
    GroupFor(groups, in.DeviceIndex(), src.size() - i)
        .entries.push_back(ListEntry{in.Data(), out.Data(), in.GetDataType(), out.GetDataType(), in.Size()});
  }
  return groups;
}

// Every tensor on the state's device (one group), or ArgumentError naming the first that is not.
template <typename TensorPointer>
std::vector<ListEntry> EntriesOnDevice(std::span<TensorPointer const> tensors, const CudaScaleState& state) {
  const int device = state.Context().DeviceIndex();
  std::vector<ListEntry> entries;
  entries.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const CudaTensor& tensor = AsCuda(tensors[i], "tensors", i);
    if (tensor.DeviceIndex() != device) {
      throw ArgumentError(
          "tensors[" + std::to_string(i) + "]",
          "is on " + tensor.GetDevice().ToString() + " but the scale state is on cuda:" + std::to_string(device));
    }
    entries.push_back(
        ListEntry{tensor.Data(), tensor.Data(), tensor.GetDataType(), tensor.GetDataType(), tensor.Size()});
  }
  return entries;
}

// EntriesOnDevice() for pairs (slot 0 the source, slot 1 the destination), which must match in
// number and in element counts.
std::vector<ListEntry> PairsOnDevice(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                     const CudaScaleState& state) {
  if (src.size() != dst.size()) {
    throw ArgumentError("dst",
                        "has " + std::to_string(dst.size()) + " tensors but src has " + std::to_string(src.size()));
  }
  const auto in = EntriesOnDevice(src, state);
  const auto out = EntriesOnDevice(dst, state);
  std::vector<ListEntry> pairs;
  pairs.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i].size != out[i].size) {
      throw ArgumentError("dst[" + std::to_string(i) + "]",
                          "has " + std::to_string(out[i].size) + " elements but src has " + std::to_string(in[i].size));
    }
    pairs.push_back(ListEntry{in[i].src, out[i].src, in[i].src_dtype, out[i].src_dtype, in[i].size});
  }
  return pairs;
}

// The accessors are const (not the device memory they point to): this serves every call.
const CudaScaleState& AsCudaState(const DeviceScaleState& state) {
  const auto* cuda_state = dynamic_cast<const CudaScaleState*>(&state);
  if (cuda_state == nullptr) {
    throw ArgumentError("state", "was not created by the CUDA backend (device " + state.GetDevice().ToString() + ")");
  }
  return *cuda_state;
}

// A pair on two GPUs: through the host (rare; same element math, so the same bits).
bool CastAcrossDevices(const CudaTensor& in, ITensor& out, float factor) {
  std::vector<float> values = in.ToFloatVector();
  for (float& value : values) {
    value *= factor;
  }
  out.CopyFromFloats(values);
  return out.HasNonFinite();
}

// The found-inf flag a fused optimizer step reads: a CUDA state's device flag (read by the
// kernel), or the host flag of another state, read here (skip_now when it is set).
struct SkipFlag {
  const std::int32_t* flag = nullptr;
  int device = -1;
  bool skip_now = false;
};

SkipFlag SkipFlagOf(const DeviceScaleState* state) {
  if (state == nullptr) {
    return {};
  }
  if (const auto* cuda_state = dynamic_cast<const CudaScaleState*>(state)) {
    return {cuda_state->FlagPointer(), cuda_state->Context().DeviceIndex(), false};
  }
  return {nullptr, -1, state->FoundInf()};
}

// ---- the launch driver: an entry point builds its lists and names its kernels; the rest is here ----

// Calls queue_work(stream) on @p context's device with its mutex held: the device's staging
// buffers, result block and partials serve every thread, one call at a time (Stage()).
template <typename QueueWork>
void OnStream(DeviceContext& context, QueueWork&& queue_work) {
  const StreamUse use(context);
  queue_work(context.Stream());
}

// Stages @p entries as one launch, chunked for @p access, and queues launch_one(launch, stream)
// through the driver unless the list holds no element. The kernels touch the list (as
// @p access says), the result block and the scale state @p state (when given). The host does
// not wait for the kernels.
template <typename LaunchOne>
void Queue(DeviceContext& context, std::span<const ListEntry> entries, Access access, LaunchOne&& launch_one,
           const DeviceScaleBlock* state = nullptr) {
  OnStream(context, [&](cudaStream_t stream) {
    const Launch launch = context.Stage(entries, access);
    if (launch.blocks != 0) {
      const std::array<BufferUse, 2> buffers{
          BufferUse{context.DeviceResultBlock(), sizeof(DeviceResult), Use::ReadWrite},
          BufferUse{state, state != nullptr ? sizeof(DeviceScaleBlock) : 0, Use::ReadWrite}};
      context.DeviceDriver().Launch("multi-tensor list", stream, KernelOperands{entries, access, buffers},
                                    [&] { launch_one(launch, stream); });
    }
  });
}

// Queues one kernel, launch(stream), on @p context's stream through the driver; it touches @p buffers.
template <typename LaunchFn>
void QueueKernel(DeviceContext& context, const char* kernel, std::initializer_list<BufferUse> buffers,
                 LaunchFn&& launch) {
  OnStream(context, [&](cudaStream_t stream) {
    context.DeviceDriver().Launch(kernel, stream, KernelOperands{{}, Access::ReadOnly, buffers},
                                  [&] { launch(stream); });
  });
}

// Queue() for each same-GPU group.
template <typename LaunchOne>
void QueueOnEachDevice(const std::vector<DeviceGroup>& groups, Access access, LaunchOne&& launch_one) {
  for (const DeviceGroup& group : groups) {
    Queue(DeviceContext::Get(group.device), group.entries, access, launch_one);
  }
}

// Queue() for kernels that answer in the result block: cleared before them, copied to the host
// after them (waits for the stream); nullopt when the list holds no element and nothing ran.
template <typename LaunchAll>
std::optional<DeviceResult> QueueAndRead(DeviceContext& context, std::span<const ListEntry> entries, Access access,
                                         LaunchAll&& launch_all) {
  std::optional<DeviceResult> result;
  Queue(context, entries, access, [&](const Launch& launch, cudaStream_t stream) {
    context.ClearResult();
    launch_all(launch, stream);
    result = context.ReadResult();
  });
  return result;
}

// QueueAndRead() of one group's kernel, launch_one(launch, flag, stream), whose answer is the
// result flag alone: whether it was raised.
template <typename LaunchOne>
bool QueueAndReadFlag(const DeviceGroup& group, Access access, LaunchOne&& launch_one) {
  DeviceContext& context = DeviceContext::Get(group.device);
  const auto result = QueueAndRead(context, group.entries, access, [&](const Launch& launch, cudaStream_t stream) {
    launch_one(launch, ResultFlag(context), stream);
  });
  return result.has_value() && result->flag != 0;
}

// QueueAndReadFlag() on every group (these kernels write, so none is skipped): whether any raised it.
template <typename LaunchOne>
bool FlagRaisedOnAnyDevice(const std::vector<DeviceGroup>& groups, Access access, LaunchOne&& launch_one) {
  bool raised = false;
  for (const DeviceGroup& group : groups) {
    raised = QueueAndReadFlag(group, access, launch_one) || raised;
  }
  return raised;
}

// QueueAndRead() of launch_one(launch, flag, amax, stream) on every group, folded: the flag
// raised anywhere, the largest amax.
template <typename LaunchOne>
NonFiniteAndAmax AmaxOnEachDevice(const std::vector<DeviceGroup>& groups, Access access, LaunchOne&& launch_one) {
  NonFiniteAndAmax total;
  for (const DeviceGroup& group : groups) {
    DeviceContext& context = DeviceContext::Get(group.device);
    const auto result = QueueAndRead(context, group.entries, access, [&](const Launch& launch, cudaStream_t stream) {
      launch_one(launch, ResultFlag(context), ResultAmax(context), stream);
    });
    if (result.has_value()) {
      total.FoundNonFinite = total.FoundNonFinite || result->flag != 0;
      total.Amax = std::max(total.Amax, result->amax);
    }
  }
  return total;
}

// The largest finite |x * factor| of @p tensor's values, read back through the host (a pair on
// two GPUs, rare).
float HostAmax(const ITensor& tensor, float factor) {
  float amax = 0.0f;
  for (const float x : tensor.ToFloatVector()) {
    const float v = std::fabs(x * factor);
    amax = std::isfinite(v) && v > amax ? v : amax;
  }
  return amax;
}

WritePassResult Answer(const NonFiniteAndAmax& result) {
  return {.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax};
}

// ---- the backend object ------------------------------------------------------------------

class CudaBackend final : public CudaFloat8Backend {
 public:
  std::string_view Name() const noexcept override { return "cuda"; }

  // A list is read only once grouped (TensorListView): the launch walks it anyway.
  std::optional<ReadPassResult> Read(TensorListView list, const ReadPassOptions& options) const override {
    ValidateReadPassOptions(options);
    if (!list.Grouped) {
      return std::nullopt;
    }
    if (options.State != nullptr) {
      // The check records into the state's flag: queued, never read back here.
      const CudaScaleState& state = AsCudaState(*options.State);
      Queue(
          state.Context(), EntriesOnDevice(list.Tensors, state), Access::ReadOnly,
          [&](const Launch& launch, cudaStream_t stream) { LaunchNonFinite(launch, state.FlagPointer(), stream); },
          state.Block());
      return ReadPassResult{};
    }
    const std::vector<DeviceGroup> groups = GroupByDevice(list.Tensors);
    if (options.Amax) {
      const NonFiniteAndAmax result = AmaxOnEachDevice(groups, Access::ReadOnly, LaunchNonFiniteAmax);
      return ReadPassResult{.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax};
    }
    if (!options.SumOfSquares) {
      // Read only: the first device that finds a non-finite value answers for the list.
      return ReadPassResult{.FoundNonFinite = std::ranges::any_of(groups, [](const DeviceGroup& group) {
                              return QueueAndReadFlag(group, Access::ReadOnly, LaunchNonFinite);
                            })};
    }
    ReadPassResult total;
    for (const DeviceGroup& group : groups) {
      DeviceContext& context = DeviceContext::Get(group.device);
      const auto result =
          QueueAndRead(context, group.entries, Access::ReadOnly, [&](const Launch& launch, cudaStream_t stream) {
            float* partials = context.Partials(launch.blocks);
            LaunchSumSquares(launch, partials, ResultFlag(context), stream);
            LaunchSumSquaresFinalize(partials, launch.blocks, static_cast<double>(options.Factor),
                                     context.DeviceResultBlock(), stream);
          });
      if (result.has_value()) {
        total.FoundNonFinite = total.FoundNonFinite || result->flag != 0;
        total.SumOfSquares += result->sum;
      }
    }
    return total;
  }

  // A list is written only once grouped, as it is read. Every pass is one launch per device: the
  // flag and the amax, when asked for, come back in the device's result block (one wait).
  std::optional<WritePassResult> Write(TensorListView src, TensorListView dst,
                                       const WritePassOptions& options) const override {
    ValidateWritePassOptions(options);
    if (!src.Grouped) {
      return std::nullopt;
    }
    if (options.State != nullptr) {
      WriteWithState(src.Tensors, dst.Tensors, options);
      return WritePassResult{};
    }
    const FactorSource factor{options.Factor};
    if (options.Op == WriteOp::Scale) {
      const std::vector<DeviceGroup> groups = GroupByDevice(src.Tensors);
      if (options.Amax) {
        return Answer(AmaxOnEachDevice(groups, Access::Writes,
                                       [&](const Launch& launch, std::int32_t* flag, float* amax, cudaStream_t stream) {
                                         LaunchUnscaleAmax(launch, factor, flag, amax, stream);
                                       }));
      }
      if (options.Check) {
        return WritePassResult{
            .FoundNonFinite = FlagRaisedOnAnyDevice(groups, Access::Writes,
                                                    [&](const Launch& launch, std::int32_t* flag, cudaStream_t stream) {
                                                      LaunchUnscale(launch, factor, flag, stream);
                                                    })};
      }
      QueueOnEachDevice(groups, Access::Writes,
                        [&](const Launch& launch, cudaStream_t stream) { LaunchScale(launch, factor, stream); });
      return WritePassResult{};
    }
    if (options.Op == WriteOp::Add) {
      const auto groups = PairsByDevice(src.Tensors, dst.Tensors, [&](const CudaTensor& in, ITensor& out) {
        // A pair on two GPUs: through the host (rare), with the kernel's rounding.
        mlframework::detail::HostAddInto(in, out, options.Factor);
      });
      QueueOnEachDevice(groups, Access::Writes, [&](const Launch& launch, cudaStream_t stream) {
        LaunchAddInto(launch, options.Factor, stream);
      });
      return WritePassResult{};
    }
    // A pair on two GPUs goes through the host (rare), with the kernel's rounding and checks.
    WritePassResult across;
    const auto groups = PairsByDevice(src.Tensors, dst.Tensors, [&](const CudaTensor& in, ITensor& out) {
      across.FoundNonFinite = CastAcrossDevices(in, out, options.Factor) || across.FoundNonFinite;
      if (options.Amax) {
        across.Amax = std::max(across.Amax, HostAmax(in, options.Factor));
      }
    });
    WritePassResult result;
    if (options.Amax) {
      result = Answer(AmaxOnEachDevice(groups, Access::Writes,
                                       [&](const Launch& launch, std::int32_t* flag, float* amax, cudaStream_t stream) {
                                         LaunchCastAmax(launch, factor, flag, amax, stream);
                                       }));
    } else if (options.Check) {
      result.FoundNonFinite = FlagRaisedOnAnyDevice(groups, Access::Writes,
                                                    [&](const Launch& launch, std::int32_t* flag, cudaStream_t stream) {
                                                      LaunchCast(launch, factor, flag, stream);
                                                    });
    } else {
      QueueOnEachDevice(groups, Access::Writes, [&](const Launch& launch, cudaStream_t stream) {
        LaunchCast(launch, factor, nullptr, stream);  // no flag: nothing to wait for
      });
      return WritePassResult{};
    }
    result.FoundNonFinite = result.FoundNonFinite || across.FoundNonFinite;
    result.Amax = std::max(result.Amax, across.Amax);
    return result;
  }

  bool AdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars,
                const DeviceScaleState* skip_if_found_inf) const override {
    const SkipFlag skip = SkipFlagOf(skip_if_found_inf);
    return skip.skip_now || QueueAdamStep(lists, scalars, skip.flag, skip.device);
  }
  bool SGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars,
               const DeviceScaleState* skip_if_found_inf) const override {
    const SkipFlag skip = SkipFlagOf(skip_if_found_inf);
    return skip.skip_now || QueueSGDStep(lists, scalars, skip.flag, skip.device);
  }
  void UpdateFloat8Scales(ITensor& state, const Float8ScaleUpdate& update) const override {
    QueueFloat8StateStep(state, update, false);
  }
  void FoldFloat8Amax(ITensor& state, const Float8ScaleUpdate& update) const override {
    QueueFloat8StateStep(state, update, true);
  }

  void ScanNonFinite(std::span<const ITensor* const> tensors, std::span<NonFiniteScan> out) const override {
    // Overflow steps only: one kernel and one wait per tensor keeps this simple and exact.
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const CudaTensor& tensor = AsCuda(tensors[i], "tensors", i);
      if (!ScanKernelHandles(tensor.GetDataType())) {
        TensorBackend::ScanNonFinite(tensors.subspan(i, 1), out.subspan(i, 1));
        continue;
      }
      DeviceContext& context = DeviceContext::Get(tensor.DeviceIndex());
      DeviceNonFiniteScan host{};
      OnStream(context, [&](cudaStream_t stream) {
        auto* device = static_cast<DeviceNonFiniteScan*>(context.Allocate(sizeof(DeviceNonFiniteScan)));
        try {
          DeviceNonFiniteScan initial{};
          initial.first_index = ~0ull;
          Driver& driver = context.DeviceDriver();
          MLFW_CUDA_CHECK(driver.MemcpyAsync(device, &initial, sizeof initial, cudaMemcpyHostToDevice, stream));
          const std::array<BufferUse, 2> buffers{BufferUse{tensor.Data(), tensor.Bytes(), Use::Read},
                                                 BufferUse{device, sizeof(DeviceNonFiniteScan), Use::ReadWrite}};
          driver.Launch("scan non-finite", stream, KernelOperands{{}, Access::ReadOnly, buffers}, [&] {
            LaunchScanNonFinite(tensor.Data(), tensor.GetDataType(), tensor.Size(), device, stream);
          });
          MLFW_CUDA_CHECK(driver.MemcpyAsync(&host, device, sizeof host, cudaMemcpyDeviceToHost, stream));
          MLFW_CUDA_CHECK(driver.StreamSynchronize(stream));
        } catch (...) {
          context.Free(device);
          throw;
        }
        context.Free(device);
      });
      out[i] = NonFiniteScan{.Count = host.count,
                             .FirstIndex = host.count == 0 ? 0 : host.first_index,
                             .HasNaN = host.nan_count != 0,
                             .HasPosInf = host.pos_inf_count != 0,
                             .HasNegInf = host.neg_inf_count != 0,
                             .NaNCount = host.nan_count,
                             .PosInfCount = host.pos_inf_count,
                             .NegInfCount = host.neg_inf_count};
    }
  }

  TensorPtr Allocate(const Shape& shape, DataType dtype, Device device) const override {
    if (!device.IsCUDA()) {
      throw ArgumentError("device", "the cuda backend allocates on CUDA devices, got " + device.ToString());
    }
    return std::make_shared<CudaTensor>(shape, dtype, device.Index);
  }

  TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) const override {
    if (!base) {
      throw ArgumentNullError("base");
    }
    auto cuda_base = std::dynamic_pointer_cast<const CudaTensor>(base);
    if (!cuda_base) {
      throw ArgumentError("base", "is not a CUDA-backend tensor (device " + base->GetDevice().ToString() + ")");
    }
    return std::make_shared<CudaTensor>(cuda_base, offset, shape);
  }

  // ---- device-resident scaling (no host synchronisation below) ----

  std::unique_ptr<DeviceScaleState> CreateScaleState(Device device, const ScalePolicy& policy,
                                                     const ScaleState& initial) const override {
    if (!device.IsCUDA()) {
      throw ArgumentError("device", "must be a CUDA device, got " + device.ToString());
    }
    return std::make_unique<CudaScaleState>(device.Index, policy, initial);
  }

  void UpdateScale(DeviceScaleState& state) const override {
    const CudaScaleState& cuda_state = AsCudaState(state);
    QueueKernel(cuda_state.Context(), "scale update",
                {BufferUse{cuda_state.Block(), sizeof(DeviceScaleBlock), Use::ReadWrite}},
                [&](cudaStream_t stream) { LaunchScaleUpdate(cuda_state.Block(), cuda_state.Policy(), stream); });
  }

 private:
  // A write pass whose factor is the state's scale or its inverse, read on the device: one launch
  // on the state's device, recording an unscale's flag (and amax while tracked) into the state.
  static void WriteWithState(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                             const WritePassOptions& options) {
    const CudaScaleState& state = AsCudaState(*options.State);
    const bool unscale = options.FactorOfState == StateFactor::InverseScale;
    const FactorSource factor{1.0f, unscale ? FactorMode::InverseOfScale : FactorMode::Scale, state.ScalePointer()};
    std::int32_t* const flag = unscale ? state.FlagPointer() : nullptr;
    const bool amax = unscale && state.AmaxTracking();  // once per call: the plain kernel without it
    const bool in_place = options.Op == WriteOp::Scale;
    const std::vector<ListEntry> entries = in_place ? EntriesOnDevice(src, state) : PairsOnDevice(src, dst, state);
    Queue(
        state.Context(), entries, Access::Writes,
        [&](const Launch& launch, cudaStream_t stream) {
          if (in_place && amax) {
            LaunchUnscaleAmax(launch, factor, flag, state.AmaxPointer(), stream);
          } else if (in_place && unscale) {
            LaunchUnscale(launch, factor, flag, stream);
          } else if (in_place) {
            LaunchScale(launch, factor, stream);
          } else if (amax) {
            LaunchCastAmax(launch, factor, flag, state.AmaxPointer(), stream);
          } else {
            LaunchCast(launch, factor, flag, stream);
          }
        },
        state.Block());
  }
};

}  // namespace

void CudaScaleState::FlagToTensor(TensorPtr& out) const {
  const int device = context_->DeviceIndex();
  const bool amax = AmaxTracking();
  const std::size_t count = amax ? 2 : 1;
  const auto* current = dynamic_cast<const CudaTensor*>(out.get());
  if (current == nullptr || current->GetDataType() != DataType::Float32 || current->Size() != count ||
      current->DeviceIndex() != device) {
    out = std::make_shared<CudaTensor>(Shape{count}, DataType::Float32, device);
    current = static_cast<const CudaTensor*>(out.get());
  }
  QueueKernel(
      *context_, "flag to float",
      {BufferUse{block_, sizeof(DeviceScaleBlock), Use::Read},
       BufferUse{current->Data(), current->Bytes(), Use::Write}},
      [&](cudaStream_t stream) { LaunchFlagToFloat(block_, static_cast<float*>(current->Data()), amax, stream); });
}

void CudaScaleState::FlagFromTensor(const ITensor& in) {
  const CudaTensor& tensor = AsCuda(&in, "in", 0);
  const bool amax = AmaxTracking();
  const std::size_t count = amax ? 2 : 1;
  if (tensor.GetDataType() != DataType::Float32 || tensor.Size() != count ||
      tensor.DeviceIndex() != context_->DeviceIndex()) {
    throw ArgumentError("in", "must be an FP32 tensor of " + std::to_string(count) +
                                  " element(s) on cuda:" + std::to_string(context_->DeviceIndex()) + ", got " +
                                  std::string(ToString(tensor.GetDataType())) + " " + ToString(tensor.GetShape()) +
                                  " on " + tensor.GetDevice().ToString());
  }
  QueueKernel(*context_, "flag from float",
              {BufferUse{tensor.Data(), tensor.Bytes(), Use::Read},
               BufferUse{block_, sizeof(DeviceScaleBlock), Use::ReadWrite}},
              [&](cudaStream_t stream) {
                LaunchFlagFromFloat(block_, static_cast<const float*>(tensor.Data()), amax, stream);
              });
}

const DeviceScalingBackend& BackendInstance() noexcept {
  static const CudaBackend kBackend;
  return kBackend;
}

}  // namespace mlframework::backends::cuda
