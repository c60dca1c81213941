// The C API of fp8.h: FP8 casts over lent DLTensors and the FP8 scaling recipes.

#include <mlframework/c/fp8.h>

#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>

#include "FieldMap.hpp"
#include "StateBytes.hpp"
#include "Tensors.hpp"

/// An FP8 scaling recipe (DelayedScaling or CurrentScaling) and the CUDA devices of its state.
struct mlfw_fp8_recipe {
  std::unique_ptr<mlframework::fp8::IScalingRecipe> recipe;
  // The CUDA devices of the registered tensors, in registration order, each once: the devices
  // whose state mlfw_fp8_recipe_update_scales() orders on the caller's stream (CPU state needs none).
  std::vector<int> cuda_devices;
};

namespace mlframework::c_api {
namespace {

constexpr EnumMap<mlfw_fp8_format, DataType, 2> kFloat8Formats{
    "mlfw_fp8_format",
    {{{MLFW_FP8_E4M3, "MLFW_FP8_E4M3", DataType::Float8E4M3FN},
      {MLFW_FP8_E5M2, "MLFW_FP8_E5M2", DataType::Float8E5M2}}}};

constexpr EnumMap<mlfw_fp8_recipe_format, fp8::Format, 2> kRecipeFormats{
    "mlfw_fp8_recipe_format",
    {{{MLFW_FP8_RECIPE_E4M3, "MLFW_FP8_RECIPE_E4M3", fp8::Format::E4M3},
      {MLFW_FP8_RECIPE_HYBRID, "MLFW_FP8_RECIPE_HYBRID", fp8::Format::HYBRID}}}};

constexpr EnumMap<mlfw_fp8_tensor_role, fp8::TensorRole, 2> kRoles{
    "mlfw_fp8_tensor_role",
    {{{MLFW_FP8_FORWARD, "MLFW_FP8_FORWARD", fp8::TensorRole::Forward},
      {MLFW_FP8_GRADIENT, "MLFW_FP8_GRADIENT", fp8::TensorRole::Gradient}}}};

constexpr EnumMap<mlfw_amax_compute_algo, fp8::AmaxComputeAlgorithm, 2> kAmaxAlgorithms{
    "mlfw_amax_compute_algo",
    {{{MLFW_AMAX_MAX, "MLFW_AMAX_MAX", fp8::AmaxComputeAlgorithm::Max},
      {MLFW_AMAX_MOST_RECENT, "MLFW_AMAX_MOST_RECENT", fp8::AmaxComputeAlgorithm::MostRecent}}}};

constexpr FieldMap kDelayedScalingFields{
    Field{&mlfw_delayed_scaling_config::margin, &fp8::DelayedScalingConfig::Margin, {"margin", "Margin"}},
    EnumField{&mlfw_delayed_scaling_config::fp8_format,
              &fp8::DelayedScalingConfig::Fp8Format,
              kRecipeFormats,
              {"fp8_format", "Fp8Format"}},
    Field{&mlfw_delayed_scaling_config::amax_history_len,
          &fp8::DelayedScalingConfig::AmaxHistoryLen,
          {"amax_history_len", "AmaxHistoryLen"}},
    EnumField{&mlfw_delayed_scaling_config::amax_compute_algo,
              &fp8::DelayedScalingConfig::AmaxComputeAlgo,
              kAmaxAlgorithms,
              {"amax_compute_algo", "AmaxComputeAlgo"}}};

// The @p count names of @p names; ArgumentNullError naming `names` or `names[i]`.
std::vector<std::string> Names(const char* const* names, std::size_t count) {
  if (count > 0 && names == nullptr) {
    throw ArgumentNullError("names");
  }
  std::vector<std::string> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (names[i] == nullptr) {
      throw ArgumentNullError(Indexed("names", i));
    }
    result.emplace_back(names[i]);
  }
  return result;
}

// The FP8 bytes `tensors[i]`, each in the format @p recipe gives `names[i]` (an unregistered
// name: the recipe's error), named `<name>[i]`.
std::vector<TensorPtr> RecipeBytes(const fp8::IScalingRecipe& recipe, std::span<const std::string> names,
                                   const DLTensor* const* tensors, const char* name) {
  if (!names.empty() && tensors == nullptr) {
    throw ArgumentNullError(name);
  }
  std::vector<TensorPtr> list;
  list.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    list.push_back(BorrowFloat8(tensors[i], recipe.Float8TypeOf(names[i]), Indexed(name, i)));
  }
  return list;
}

// The one value of a one-element FP32 tensor (a recipe's scale, inverse scale or amax).
float ValueOf(const TensorPtr& tensor) { return tensor->ToFloatVector().at(0); }

mlfw_status Create(mlfw_fp8_recipe_t* out, const auto& make) {
  return Call([&] {
    Deref(out, "out");
    auto handle = std::make_unique<mlfw_fp8_recipe>();
    handle->recipe = make();
    *out = handle.release();
  });
}

}  // namespace
}  // namespace mlframework::c_api

extern "C" {

mlfw_status mlfw_fp8_amax(const DLTensor* const* tensors, size_t count, const DLTensor* amax, void* stream) {
  return Call([&] {
    const auto list = BorrowList(tensors, count, "tensors");
    const mlframework::TensorPtr out = Borrow(amax, "amax");
    const StreamScope scope(stream, out->GetDevice());
    mlframework::Amax(list, out);
  });
}

mlfw_status mlfw_fp8_scaled_cast(const DLTensor* const* src, const DLTensor* const* dst, size_t count,
                                 mlfw_fp8_format format, const DLTensor* scale, const DLTensor* amax, void* stream) {
  return Call([&] {
    const mlframework::DataType float8 = mlframework::c_api::kFloat8Formats.ToCpp(format, "format");
    const auto in = BorrowList(src, count, "src");
    const auto out = BorrowFloat8List(dst, count, float8, "dst");
    const mlframework::TensorPtr scales = Borrow(scale, "scale");
    const mlframework::TensorPtr amaxes = amax == nullptr ? nullptr : Borrow(amax, "amax");
    const StreamScope scope(stream, scales->GetDevice());
    mlframework::ScaledCastToFloat8(in, out, scales, amaxes);
  });
}

mlfw_status mlfw_fp8_dequantize(const DLTensor* const* src, mlfw_fp8_format format, const DLTensor* const* dst,
                                size_t count, const DLTensor* scale_inv, void* stream) {
  return Call([&] {
    const mlframework::DataType float8 = mlframework::c_api::kFloat8Formats.ToCpp(format, "format");
    const auto in = BorrowFloat8List(src, count, float8, "src");
    const auto out = BorrowList(dst, count, "dst");
    const mlframework::TensorPtr inverses = Borrow(scale_inv, "scale_inv");
    const StreamScope scope(stream, inverses->GetDevice());
    mlframework::DequantizeFloat8(in, out, inverses);
  });
}

mlfw_status mlfw_delayed_scaling_config_default(mlfw_delayed_scaling_config* config) {
  return Call([&] {
    Deref(config, "config") = mlframework::c_api::kDelayedScalingFields.ToC(mlframework::fp8::DelayedScalingConfig{});
  });
}

mlfw_status mlfw_delayed_scaling_create(const mlfw_delayed_scaling_config* config, mlfw_fp8_recipe_t* out) {
  return mlframework::c_api::Create(out, [&] {
    const mlfw_delayed_scaling_config& c_config = Deref(config, "config");
    return mlframework::c_api::WithCNames({{"config", mlframework::c_api::kDelayedScalingFields.Names()}}, [&] {
      return std::make_unique<mlframework::fp8::DelayedScaling>(
          mlframework::c_api::kDelayedScalingFields.ToCpp(c_config, "config"));
    });
  });
}

mlfw_status mlfw_current_scaling_create(mlfw_fp8_recipe_format fp8_format, mlfw_fp8_recipe_t* out) {
  return mlframework::c_api::Create(out, [&] {
    return std::make_unique<mlframework::fp8::CurrentScaling>(mlframework::fp8::CurrentScalingConfig{
        .Fp8Format = mlframework::c_api::kRecipeFormats.ToCpp(fp8_format, "fp8_format")});
  });
}

void mlfw_fp8_recipe_destroy(mlfw_fp8_recipe_t recipe) {
  delete recipe;  // NOLINT(cppcoreguidelines-owning-memory): the handle mlfw_*_scaling_create made
}

mlfw_status mlfw_fp8_recipe_register(mlfw_fp8_recipe_t recipe, const char* name, mlfw_fp8_tensor_role role,
                                     const DLTensor* like) {
  return Call([&] {
    mlfw_fp8_recipe& handle = Deref(recipe, "recipe");
    Deref(name, "name");
    const mlframework::fp8::TensorRole cpp_role = mlframework::c_api::kRoles.ToCpp(role, "role");
    const mlframework::TensorPtr tensor = Borrow(like, "like");
    handle.recipe->Register(name, cpp_role, *tensor);
    const mlframework::Device device = tensor->GetDevice();
    if (device.IsCUDA() && std::ranges::find(handle.cuda_devices, device.Index) == handle.cuda_devices.end()) {
      handle.cuda_devices.push_back(device.Index);
    }
  });
}

mlfw_status mlfw_fp8_recipe_format_of(mlfw_fp8_recipe_t recipe, const char* name, mlfw_fp8_format* format) {
  return Call([&] {
    const mlfw_fp8_recipe& handle = Deref(recipe, "recipe");
    Deref(name, "name");
    mlfw_fp8_format& result = Deref(format, "format");
    result = mlframework::c_api::kFloat8Formats.ToC(handle.recipe->Float8TypeOf(name));
  });
}

mlfw_status mlfw_fp8_recipe_quantize(mlfw_fp8_recipe_t recipe, const char* const* names, const DLTensor* const* src,
                                     const DLTensor* const* dst, size_t count, void* stream) {
  return Call([&] {
    mlfw_fp8_recipe& handle = Deref(recipe, "recipe");
    const std::vector<std::string> keys = mlframework::c_api::Names(names, count);
    const auto in = BorrowList(src, count, "src");
    const auto out = mlframework::c_api::RecipeBytes(*handle.recipe, keys, dst, "dst");
    const StreamScope scope(stream, mlframework::c_api::DeviceOf(in));
    handle.recipe->Quantize(keys, in, out);
  });
}

mlfw_status mlfw_fp8_recipe_dequantize(mlfw_fp8_recipe_t recipe, const char* const* names, const DLTensor* const* src,
                                       const DLTensor* const* dst, size_t count, void* stream) {
  return Call([&] {
    const mlfw_fp8_recipe& handle = Deref(recipe, "recipe");
    const std::vector<std::string> keys = mlframework::c_api::Names(names, count);
    const auto in = mlframework::c_api::RecipeBytes(*handle.recipe, keys, src, "src");
    const auto out = BorrowList(dst, count, "dst");
    const StreamScope scope(stream, mlframework::c_api::DeviceOf(out));
    handle.recipe->Dequantize(keys, in, out);
  });
}

mlfw_status mlfw_fp8_recipe_update_scales(mlfw_fp8_recipe_t recipe, void* stream) {
  return Call([&] {
    mlfw_fp8_recipe& handle = Deref(recipe, "recipe");
    // One CUDA stream belongs to one device: it cannot order the state of two.
    if (stream != nullptr && handle.cuda_devices.size() > 1) {
      throw mlframework::ArgumentError("stream", "is one CUDA stream but the recipe's tensors are on CUDA devices " +
                                                     std::to_string(handle.cuda_devices[0]) + " and " +
                                                     std::to_string(handle.cuda_devices[1]) +
                                                     " (pass NULL, or keep one recipe per device)");
    }
    // The stream orders the CUDA state, whatever else (CPU state) the recipe holds.
    const StreamScope scope(stream, handle.cuda_devices.empty() ? mlframework::Device::CPU()
                                                                : mlframework::Device::CUDA(handle.cuda_devices[0]));
    handle.recipe->UpdateScales();
  });
}

mlfw_status mlfw_fp8_recipe_scale(mlfw_fp8_recipe_t recipe, const char* name, float* scale, float* scale_inv,
                                  float* amax) {
  return Call([&] {
    const mlfw_fp8_recipe& handle = Deref(recipe, "recipe");
    Deref(name, "name");
    // Read all three before writing any: an unknown name leaves the caller's floats as they were.
    const std::array<float, 3> values{mlframework::c_api::ValueOf(handle.recipe->Scale(name)),
                                      mlframework::c_api::ValueOf(handle.recipe->ScaleInv(name)),
                                      mlframework::c_api::ValueOf(handle.recipe->Amax(name))};
    for (const auto& [out, value] :
         {std::pair{scale, values[0]}, std::pair{scale_inv, values[1]}, std::pair{amax, values[2]}}) {
      if (out != nullptr) {
        *out = value;
      }
    }
  });
}

mlfw_status mlfw_fp8_recipe_state_dict(mlfw_fp8_recipe_t recipe, void* buffer, size_t capacity, size_t* size) {
  return mlframework::c_api::SaveState(recipe, "recipe", buffer, capacity, size,
                                       [](const mlfw_fp8_recipe& handle) { return handle.recipe->StateDict(); });
}

mlfw_status mlfw_fp8_recipe_load_state_dict(mlfw_fp8_recipe_t recipe, const void* data, size_t size) {
  return mlframework::c_api::LoadState(
      recipe, "recipe", data, size, [](mlfw_fp8_recipe& handle, auto bytes) { handle.recipe->LoadStateDict(bytes); });
}

}  // extern "C"
