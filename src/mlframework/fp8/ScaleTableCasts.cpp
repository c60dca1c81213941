// The recipes' casts: core's fused FP8 kernels (core/Float8Cast.hpp) on runs of consecutive
// slots, so a list registered and quantized in the same order is one call per device.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/fp8/ScaleTable.hpp"

namespace mlframework::fp8::detail {

void ScaleTable::Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                          std::span<const TensorPtr> dst, const Float8ScaleUpdate* current) const {
  const std::vector<const Entry*> entries = Check(names, src, dst, true);
  if (current != nullptr) {
    // Current scaling sets a name's scale from each cast's own amax: a second cast of the name
    // would replace the scale the first destination was cast with (its scale_inv lost).
    std::vector<std::pair<const Entry*, std::size_t>> order;
    order.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) order.emplace_back(entries[i], i);
    std::sort(order.begin(), order.end());
    for (std::size_t k = 1; k < order.size(); ++k) {
      if (order[k].first == order[k - 1].first) {
        const std::size_t i = order[k].second;
        throw ArgumentError("names[" + std::to_string(i) + "]",
                            "'" + names[i] + "' is also names[" + std::to_string(order[k - 1].second) +
                                "]; current scaling casts a tensor once per call (each cast sets its scale)");
      }
    }
  }
  for (const Run& run : Runs(entries)) {
    const std::size_t count = run.end - run.begin;
    const std::span<const TensorPtr> run_src = src.subspan(run.begin, count);
    const std::span<const TensorPtr> run_dst = dst.subspan(run.begin, count);
    if (current != nullptr) {
      // Current scaling: this step's amax, then the scale from it, both on the device.
      mlframework::Amax(run_src, RowView(run.group, 0, run.first_slot, count));
      UpdateRun(run, *current);
    }
    // The cast's amax lands in the scratch row and is folded into row 0, so several casts of a
    // tensor in one step record the largest of their amaxes (Transformer Engine's casts take the
    // atomic maximum into the recorded amax the same way).
    ScaledCastToFloat8(run_src, run_dst, RowView(run.group, ScaleRow(), run.first_slot, count),
                       RowView(run.group, ScratchRow(), run.first_slot, count));
    FoldRun(run);
  }
}

void ScaleTable::Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                            std::span<const TensorPtr> dst) const {
  const std::vector<const Entry*> entries = Check(names, src, dst, false);
  for (const Run& run : Runs(entries)) {
    const std::size_t count = run.end - run.begin;
    DequantizeFloat8(src.subspan(run.begin, count), dst.subspan(run.begin, count),
                     RowView(run.group, ScaleInvRow(), run.first_slot, count));
  }
}

}  // namespace mlframework::fp8::detail
