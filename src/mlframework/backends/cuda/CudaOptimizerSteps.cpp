#include "mlframework/backends/cuda/CudaOptimizerSteps.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/CudaTensorImpl.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/LowBitSteps.cuh"
#include "mlframework/backends/cuda/OptimizerSteps.cuh"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework::backends::cuda {

namespace {

// The device memory of entry @p i of @p list when it is a CUDA tensor (null entry: nullptr; not
// a CUDA tensor: nullopt), its GPU checked against *device (set by the first tensor).
std::optional<void*> DataOf(std::span<const TensorPtr> list, std::size_t i, int& device) {
  if (list.empty() || !list[i]) {
    return nullptr;
  }
  const ITensor& tensor = *list[i];
  if (typeid(tensor) != typeid(CudaTensor)) {
    return std::nullopt;
  }
  const auto& cuda = static_cast<const CudaTensor&>(tensor);
  if (device < 0) {
    device = cuda.DeviceIndex();
  } else if (cuda.DeviceIndex() != device) {
    throw ArgumentError("lists", "holds tensors on cuda:" + std::to_string(device) + " and on " +
                                     tensor.GetDevice().ToString() + "; one fused step runs on one GPU");
  }
  return cuda.Data();
}

// True when @p lists store a master or a state other than in FP32 (the low-bit kernels).
bool LowBit(const OptimizerStepLists& lists) {
  return lists.Masters != MasterFormat::Float32 || lists.FirstStateFormat != StateFormat::Float32 ||
         lists.SecondStateFormat != StateFormat::Float32;
}

// The table of the FP32 kernels (OptimizerSteps.cuh).
struct Table {
  std::vector<OptimizerEntry> entries;  // non-empty tensors, then the sentinel
  std::uint64_t total = 0;              // elements: the kernels' virtual array
  int device = -1;
};

// The table of the low-bit kernels (LowBitSteps.cuh).
struct LowBitTable {
  std::vector<LowBitEntry> entries;  // non-empty tensors, then the sentinel
  std::uint64_t total = 0;           // tiles: one thread block each
  int device = -1;
  LowBitFormats formats;
};

// Fills @p table with the kernels' table of @p lists (false when a tensor is not a CUDA tensor).
// The caller keeps @p table between steps, so a step of thousands of tensors allocates nothing.
bool Build(const OptimizerStepLists& lists, Table& table) {
  table.entries.clear();
  table.total = 0;
  table.device = -1;
  for (std::size_t i = 0; i < lists.Parameters.size(); ++i) {
    // The tensor objects lie scattered on the heap: ask for them a few entries ahead.
    mlframework::detail::PrefetchStepEntry(lists, i + mlframework::detail::kObjectPrefetchAhead);
    const auto p = DataOf(lists.Parameters, i, table.device);
    const auto g = DataOf(lists.Gradients, i, table.device);
    const auto s1 = DataOf(lists.FirstState, i, table.device);
    const auto s2 = DataOf(lists.SecondState, i, table.device);
    const auto low = DataOf(lists.LowPrecisionCopies, i, table.device);
    if (!p || !g || !s1 || !s2 || !low) {
      return false;
    }
    const std::size_t count = lists.Parameters[i]->Size();
    if (count == 0) {
      continue;
    }
    const DataType low_dtype = *low != nullptr ? lists.LowPrecisionCopies[i]->GetDataType() : DataType::BFloat16;
    table.entries.push_back(OptimizerEntry{static_cast<float*>(*p), static_cast<const float*>(*g),
                                           static_cast<float*>(*s1), static_cast<float*>(*s2), *low, table.total,
                                           static_cast<std::uint32_t>(low_dtype), 0});
    table.total += count;
  }
  table.entries.push_back(OptimizerEntry{nullptr, nullptr, nullptr, nullptr, nullptr, table.total, 0, 0});
  return true;
}

bool Build(const OptimizerStepLists& lists, LowBitTable& table) {
  table.entries.clear();
  table.total = 0;
  table.device = -1;
  table.formats = LowBitFormats{.first = lists.FirstStateFormat,
                                .second = lists.SecondStateFormat,
                                .masters = lists.Masters,
                                .block_size = static_cast<std::uint32_t>(lists.StateBlockSize),
                                .seed = lists.RoundingSeed,
                                .step = lists.RoundingStep};
  for (std::size_t i = 0; i < lists.Parameters.size(); ++i) {
    mlframework::detail::PrefetchStepEntry(lists, i + mlframework::detail::kObjectPrefetchAhead);
    const auto p = DataOf(lists.Parameters, i, table.device);
    const auto g = DataOf(lists.Gradients, i, table.device);
    const auto s1 = DataOf(lists.FirstState, i, table.device);
    const auto s2 = DataOf(lists.SecondState, i, table.device);
    const auto c1 = DataOf(lists.FirstStateScales, i, table.device);
    const auto c2 = DataOf(lists.SecondStateScales, i, table.device);
    const auto r = DataOf(lists.ParameterRemainders, i, table.device);
    const auto low = DataOf(lists.LowPrecisionCopies, i, table.device);
    if (!p || !g || !s1 || !s2 || !c1 || !c2 || !r || !low) {
      return false;
    }
    const std::size_t count = lists.Parameters[i]->Size();
    if (count == 0) {
      continue;
    }
    const DataType low_dtype = *low != nullptr ? lists.LowPrecisionCopies[i]->GetDataType() : DataType::BFloat16;
    table.entries.push_back(LowBitEntry{*p, static_cast<const float*>(*g), *s1, *s2, static_cast<float*>(*c1),
                                        static_cast<float*>(*c2), static_cast<std::uint16_t*>(*r), *low, table.total,
                                        count, lists.ElementOffsets.empty() ? 0 : lists.ElementOffsets[i],
                                        static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(low_dtype)});
    table.total += LowBitTiles(count);
  }
  table.entries.push_back(
      LowBitEntry{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, table.total, 0, 0, 0, 0});
  return true;
}

// The buffers every step touches: the table, the skip flag and the step count (read).
std::vector<BufferUse> StepBuffers(const void* device_table, std::size_t table_bytes, const std::int32_t* skip_flag,
                                   const float* step_count) {
  return {{device_table, table_bytes, Use::Read},
          {skip_flag, skip_flag != nullptr ? sizeof(std::int32_t) : 0, Use::Read},
          {step_count, step_count != nullptr ? sizeof(float) : 0, Use::Read}};
}

// What the FP32 kernel touches besides StepBuffers(): per tensor, the parameters and the two
// moments (read and written), the gradients (read) and the low-precision copy (written).
std::vector<BufferUse> OperandsOf(const Table& table, const void* device_table, std::size_t table_bytes,
                                  const std::int32_t* skip_flag, const float* step_count) {
  std::vector<BufferUse> buffers = StepBuffers(device_table, table_bytes, skip_flag, step_count);
  for (std::size_t i = 0; i + 1 < table.entries.size(); ++i) {
    const OptimizerEntry& entry = table.entries[i];
    const std::size_t count = table.entries[i + 1].offset - entry.offset;
    const std::size_t floats = count * sizeof(float);
    buffers.push_back({entry.parameter, floats, Use::ReadWrite});
    buffers.push_back({entry.gradient, floats, Use::Read});
    buffers.push_back({entry.first, entry.first != nullptr ? floats : 0, Use::ReadWrite});
    buffers.push_back({entry.second, entry.second != nullptr ? floats : 0, Use::ReadWrite});
    if (entry.low_precision != nullptr) {
      buffers.push_back(
          {entry.low_precision, count * ElementSize(static_cast<DataType>(entry.low_precision_dtype)), Use::Write});
    }
  }
  return buffers;
}

// What the low-bit kernel touches besides StepBuffers(): per tensor, the masters (and remainders),
// the states and their scales (read and written), the gradients (read) and the copy (written).
std::vector<BufferUse> OperandsOf(const LowBitTable& table, const void* device_table, std::size_t table_bytes,
                                  const std::int32_t* skip_flag, const float* step_count) {
  std::vector<BufferUse> buffers = StepBuffers(device_table, table_bytes, skip_flag, step_count);
  const LowBitFormats& f = table.formats;
  const std::size_t master_bytes = f.masters == MasterFormat::Float32 ? sizeof(float) : sizeof(std::uint16_t);
  const std::size_t first_bytes = ElementSize(StateStorageDType(f.first));
  const std::size_t second_bytes = ElementSize(StateStorageDType(f.second));
  for (std::size_t i = 0; i + 1 < table.entries.size(); ++i) {
    const LowBitEntry& entry = table.entries[i];
    const std::size_t count = entry.count;
    const std::size_t scale_bytes = StateBlockCount(count, f.block_size) * sizeof(float);
    buffers.push_back({entry.parameter, count * master_bytes, Use::ReadWrite});
    buffers.push_back({entry.gradient, count * sizeof(float), Use::Read});
    buffers.push_back({entry.first, entry.first != nullptr ? count * first_bytes : 0, Use::ReadWrite});
    buffers.push_back({entry.second, entry.second != nullptr ? count * second_bytes : 0, Use::ReadWrite});
    buffers.push_back({entry.first_scales, entry.first_scales != nullptr ? scale_bytes : 0, Use::ReadWrite});
    buffers.push_back({entry.second_scales, entry.second_scales != nullptr ? scale_bytes : 0, Use::ReadWrite});
    buffers.push_back(
        {entry.remainders, entry.remainders != nullptr ? count * sizeof(std::uint16_t) : 0, Use::ReadWrite});
    if (entry.low_precision != nullptr) {
      buffers.push_back(
          {entry.low_precision, count * ElementSize(static_cast<DataType>(entry.low_precision_dtype)), Use::Write});
    }
  }
  return buffers;
}

// Uploads the table and queues launch(entries, count, total, step_count, stream) on the tensors'
// GPU, then the kernel that counts the step when the lists keep a step count.
template <typename TableType, typename LaunchFn>
bool Queue(const OptimizerStepLists& lists, TableType& kept, const std::int32_t* skip_flag, int flag_device,
           LaunchFn&& launch) {
  using Entry = typename decltype(kept.entries)::value_type;
  if (!Build(lists, kept)) {
    return false;
  }
  const TableType* const table = &kept;
  const std::optional<void*> count_data = DataOf(std::span<const TensorPtr>(&lists.StepCount, 1), 0, kept.device);
  if (!count_data) {
    return false;
  }
  auto* step_count = static_cast<float*>(*count_data);
  if (table->total == 0 && step_count == nullptr) {
    return true;
  }
  if (skip_flag != nullptr && flag_device != table->device) {
    throw ArgumentError("skip_if_found_inf", "is on cuda:" + std::to_string(flag_device) +
                                                 " but the tensors are on cuda:" + std::to_string(table->device));
  }
  DeviceContext& context = DeviceContext::Get(table->device);
  // The join with the framework's stream (StreamGuard): the step waits for the gradients it
  // wrote, and its next kernels wait for the new parameters.
  const StreamUse use(context);
  Driver& driver = context.DeviceDriver();
  if (table->total != 0) {
    const std::size_t bytes = table->entries.size() * sizeof(Entry);
    // The same parameters step again and again: their table is uploaded once and kept, so a
    // warmed-up step allocates nothing and waits for nothing (capture-safe).
    const auto* device_table =
        static_cast<const Entry*>(context.UploadKept(std::as_bytes(std::span<const Entry>(table->entries))));
    const std::vector<BufferUse> buffers = driver.RecordsOperands()
                                               ? OperandsOf(*table, device_table, bytes, skip_flag, step_count)
                                               : std::vector<BufferUse>{};
    driver.Launch("fused optimizer step", context.Stream(), KernelOperands{{}, Access::Writes, buffers}, [&] {
      launch(*table, device_table, static_cast<std::int32_t>(table->entries.size() - 1), step_count, context.Stream());
    });
  }
  if (step_count != nullptr) {
    const std::array<BufferUse, 2> buffers{
        BufferUse{step_count, sizeof(float), Use::ReadWrite},
        BufferUse{skip_flag, skip_flag != nullptr ? sizeof(std::int32_t) : 0, Use::Read}};
    driver.Launch("step count", context.Stream(), KernelOperands{{}, Access::Writes, buffers},
                  [&] { LaunchAdvanceStepCount(step_count, skip_flag, context.Stream()); });
  }
  return true;
}

// Queues the step of @p lists on the low-bit kernels (@p low_bit(table, entries, count,
// step_count, stream)) when a master or state is not FP32, else on the FP32 ones (@p fp32). The
// tables are reused: their capacity stays between steps.
template <typename LowBitLaunch, typename Fp32Launch>
bool QueueStep(const OptimizerStepLists& lists, const std::int32_t* skip_flag, int flag_device, LowBitLaunch&& low_bit,
               Fp32Launch&& fp32) {
  if (LowBit(lists)) {
    thread_local LowBitTable kept;
    return Queue(lists, kept, skip_flag, flag_device, low_bit);
  }
  thread_local Table kept;
  return Queue(lists, kept, skip_flag, flag_device, fp32);
}

}  // namespace

bool QueueAdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars, const std::int32_t* skip_flag,
                   int flag_device) {
  return QueueStep(
      lists, skip_flag, flag_device,
      [&](const LowBitTable& table, const LowBitEntry* entries, std::int32_t count, const float* step_count,
          cudaStream_t stream) {
        LaunchLowBitAdamStep(entries, count, table.total, table.formats, scalars, skip_flag, step_count, stream);
      },
      [&](const Table& table, const OptimizerEntry* entries, std::int32_t count, const float* step_count,
          cudaStream_t stream) {
        LaunchAdamStep(entries, count, table.total, scalars, skip_flag, step_count, stream);
      });
}

bool QueueSGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars, const std::int32_t* skip_flag,
                  int flag_device) {
  return QueueStep(
      lists, skip_flag, flag_device,
      [&](const LowBitTable& table, const LowBitEntry* entries, std::int32_t count, const float* step_count,
          cudaStream_t stream) {
        LaunchLowBitSGDStep(entries, count, table.total, table.formats, scalars, skip_flag, step_count, stream);
      },
      [&](const Table& table, const OptimizerEntry* entries, std::int32_t count, const float* step_count,
          cudaStream_t stream) { LaunchSGDStep(entries, count, table.total, scalars, skip_flag, step_count, stream); });
}

}  // namespace mlframework::backends::cuda
