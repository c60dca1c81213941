#include <mlframework/core/Float8ScaleUpdate.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

namespace mlframework {

void ValidateFloat8ScaleUpdate(const Float8ScaleUpdate& update, std::size_t elements) {
  if (update.HistoryLength == 0) {
    throw ArgumentError("update.HistoryLength", "is 0; an amax history has at least one row");
  }
  // Float8StateRows() must not wrap around a size_t, or a small state would pass the size check.
  if (update.HistoryLength > SIZE_MAX - Float8StateRows(0)) {
    throw ArgumentError("update.HistoryLength", std::to_string(update.HistoryLength) + " is above " +
                                                    std::to_string(SIZE_MAX - Float8StateRows(0)) +
                                                    ": the state's rows (H + 4) would not fit a size_t");
  }
  if (update.Count == 0 || elements / update.Count != Float8StateRows(update.HistoryLength) ||
      elements % update.Count != 0) {
    throw ArgumentError("state", "has " + std::to_string(elements) + " elements; a state of " +
                                     std::to_string(update.Count) + " scales with a history of " +
                                     std::to_string(update.HistoryLength) + " rows has " +
                                     std::to_string(Float8StateRows(update.HistoryLength) * update.Count));
  }
  if (update.First > update.Count || update.Length > update.Count - update.First) {
    throw ArgumentError("update", "slots [" + std::to_string(update.First) + ", " +
                                      std::to_string(update.First + update.Length) + ") lie outside the " +
                                      std::to_string(update.Count) + " scales");
  }
  if (update.Margin < 0 || update.Margin > kMaxFloat8Margin) {
    throw ArgumentError("update.Margin",
                        std::to_string(update.Margin) + " is outside [0, " + std::to_string(kMaxFloat8Margin) + "]");
  }
}

void UpdateFloat8ScalesOnHost(std::span<float> state, const Float8ScaleUpdate& update) {
  ValidateFloat8ScaleUpdate(update, state.size());
  const std::size_t n = update.Count;
  const std::size_t h = update.HistoryLength;
  float* scale = state.data() + h * n;
  float* scale_inv = scale + n;
  const float* fp8_max = scale_inv + n;
  for (std::size_t j = update.First; j < update.First + update.Length; ++j) {
    float* history = state.data() + j;  // column j: entry i at history[i * n]
    const float last = history[0];
    float longest = 0.0f;  // covers every entry: rows 1..H-1, then row 0 as `last`
    for (std::size_t i = 0; i < h; ++i) {
      const float a = i + 1 < h ? history[(i + 1) * n] : last;
      longest = std::fmax(longest, a);
      if (update.RollHistory) {
        history[i * n] = i > 0 ? a : 0.0f;
      }
    }
    const float amax = update.MostRecent ? last : longest;
    scale[j] = Float8ScaleFromAmax(amax, fp8_max[j], update.Margin, scale[j], update.KeepScaleOnBadAmax);
    scale_inv[j] = 1.0f / scale[j];
  }
}

void FoldFloat8AmaxOnHost(std::span<float> state, const Float8ScaleUpdate& update) {
  ValidateFloat8ScaleUpdate(update, state.size());
  const std::size_t n = update.Count;
  float* scratch = state.data() + (update.HistoryLength + 3) * n;
  for (std::size_t j = update.First; j < update.First + update.Length; ++j) {
    state[j] = FoldAmax(state[j], scratch[j]);
    scratch[j] = 0.0f;
  }
}

namespace {

// Runs @p on_host on @p state's elements: in place when the host addresses them, else on a copy
// written back (one read and one write of a small tensor, for backends without a kernel).
template <typename OnHost>
void OnStateElements(ITensor& state, OnHost&& on_host) {
  if (state.GetDataType() != DataType::Float32) {
    throw ArgumentError("state", "is " + std::string(ToString(state.GetDataType())) + "; FP8 scale state is Float32");
  }
  const std::span<std::byte> bytes = state.MutableHostBytes();
  if (!bytes.empty()) {
    on_host(std::span<float>(reinterpret_cast<float*>(bytes.data()), state.Size()));
    return;
  }
  std::vector<float> values = state.ToFloatVector();
  on_host(std::span<float>(values));
  state.CopyFromFloats(values);
}

}  // namespace

void TensorBackend::UpdateFloat8Scales(ITensor& state, const Float8ScaleUpdate& update) const {
  ValidateFloat8ScaleUpdate(update, state.Size());
  OnStateElements(state, [&](std::span<float> values) { UpdateFloat8ScalesOnHost(values, update); });
}

void TensorBackend::FoldFloat8Amax(ITensor& state, const Float8ScaleUpdate& update) const {
  ValidateFloat8ScaleUpdate(update, state.Size());
  OnStateElements(state, [&](std::span<float> values) { FoldFloat8AmaxOnHost(values, update); });
}

}  // namespace mlframework
