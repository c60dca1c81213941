#include <mlframework/distributed/Float8Amax.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/distributed/Agreement.hpp"

namespace mlframework::distributed {

namespace {

// The writable amax view of @p name, or ArgumentError naming `names` / `recipe`.
TensorPtr AmaxView(const fp8::IScalingRecipe& recipe, const std::string& name) {
  if (!recipe.IsRegistered(name)) {
    throw ArgumentError("names", "'" + name + "' is not registered in the recipe '" + std::string(recipe.Name()) + "'");
  }
  TensorPtr amax;
  try {
    amax = recipe.Amax(name);
  } catch (const Error& error) {
    throw ArgumentError(
        "recipe", "'" + std::string(recipe.Name()) + "' has no per-tensor amax for '" + name + "': " + error.what());
  }
  if (!amax || amax->Size() != 1 || amax->GetDataType() != DataType::Float32) {
    throw ArgumentError("recipe", "'" + std::string(recipe.Name()) + "' has no per-tensor amax for '" + name +
                                      "' (Amax() must be a one-element Float32 tensor, got " +
                                      (amax ? std::to_string(amax->Size()) + " element(s) of " +
                                                  std::string(ToString(amax->GetDataType()))
                                            : std::string("null")) +
                                      ")");
  }
  return amax;
}

}  // namespace

void AllReduceAmax(IProcessGroup& group, fp8::IScalingRecipe& recipe, std::span<const std::string> names) {
  if (names.empty()) return;  // every rank passes the same names: nobody communicates
  std::vector<TensorPtr> amax;
  TensorPtr flat;
  std::vector<TensorPtr> packed;
  // Every check (and the allocation of the flat buffer) before the collective, agreed over the
  // group: a rank that fails here must not leave the others waiting in the all-reduce.
  detail::AgreeOn(group, "AllReduceAmax", [&] {
    amax.reserve(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), names[i]) !=
          names.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw ArgumentError("names", "'" + names[i] + "' is listed twice");
      }
      amax.push_back(AmaxView(recipe, names[i]));
      if (amax.back()->GetDevice() != amax.front()->GetDevice()) {
        throw ArgumentError("names", "the amax of '" + names[i] + "' is on " + amax.back()->GetDevice().ToString() +
                                         ", that of '" + names[0] + "' on " + amax.front()->GetDevice().ToString() +
                                         ": agree the amaxes of each device with a call of their own");
      }
    }
    // One buffer on the amaxes' device, made by their own backend (a recipe keeps its state
    // there), and views of its elements: the fused copies pack and unpack it without the host.
    const TensorBackend* backend = amax.front()->Backend();
    // A user recipe's tensors without a backend: a tensor of the device's own backend.
    flat = backend != nullptr ? backend->Allocate({amax.size()}, DataType::Float32, amax.front()->GetDevice())
                              : Zeros({amax.size()}, DataType::Float32, amax.front()->GetDevice());
    backend = flat->Backend();
    packed.reserve(amax.size());
    for (std::size_t i = 0; i < amax.size(); ++i) packed.push_back(backend->View(flat, i, amax[i]->GetShape()));
  });
  CopyInto(amax, packed);
  group.AllReduce(*flat, ReduceOp::Max);
  CopyInto(packed, amax);
}

void AllReduceAmax(IProcessGroup& group, fp8::IScalingRecipe& recipe) {
  const std::vector<std::string> names = recipe.Names();
  AllReduceAmax(group, recipe, names);
}

}  // namespace mlframework::distributed
