#include <cctype>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <mlframework/c/optimizers.h>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "Call.hpp"
#include "FieldMap.hpp"
#include "Handles.hpp"
#include "StateBytes.hpp"

namespace mlframework::c_api {
namespace {

constexpr FieldMap kAdamFields{
    Field{&mlfw_adam_options::learning_rate, &optimizers::AdamOptions::LearningRate, {"learning_rate", "LearningRate"}},
    Field{&mlfw_adam_options::beta1, &optimizers::AdamOptions::Beta1, {"beta1", "Beta1"}},
    Field{&mlfw_adam_options::beta2, &optimizers::AdamOptions::Beta2, {"beta2", "Beta2"}},
    Field{&mlfw_adam_options::epsilon, &optimizers::AdamOptions::Epsilon, {"epsilon", "Epsilon"}},
    Field{&mlfw_adam_options::weight_decay, &optimizers::AdamOptions::WeightDecay, {"weight_decay", "WeightDecay"}},
    Field{&mlfw_adam_options::decoupled_weight_decay,
          &optimizers::AdamOptions::DecoupledWeightDecay,
          {"decoupled_weight_decay", "DecoupledWeightDecay"}}};

constexpr FieldMap kSGDFields{
    Field{&mlfw_sgd_options::learning_rate, &optimizers::SGDOptions::LearningRate, {"learning_rate", "LearningRate"}},
    Field{&mlfw_sgd_options::momentum, &optimizers::SGDOptions::Momentum, {"momentum", "Momentum"}},
    Field{&mlfw_sgd_options::weight_decay, &optimizers::SGDOptions::WeightDecay, {"weight_decay", "WeightDecay"}},
    Field{&mlfw_sgd_options::dampening, &optimizers::SGDOptions::Dampening, {"dampening", "Dampening"}},
    Field{&mlfw_sgd_options::nesterov, &optimizers::SGDOptions::Nesterov, {"nesterov", "Nesterov"}}};

constexpr EnumMap<mlfw_state_format, StateFormat, 6> kStateFormats{
    "mlfw_state_format",
    {{{MLFW_STATE_FLOAT32, "MLFW_STATE_FLOAT32", StateFormat::Float32},
      {MLFW_STATE_BFLOAT16, "MLFW_STATE_BFLOAT16", StateFormat::BFloat16},
      {MLFW_STATE_FLOAT16, "MLFW_STATE_FLOAT16", StateFormat::Float16},
      {MLFW_STATE_INT8_BLOCK, "MLFW_STATE_INT8_BLOCK", StateFormat::Int8Block},
      {MLFW_STATE_UINT8_BLOCK, "MLFW_STATE_UINT8_BLOCK", StateFormat::UInt8Block},
      {MLFW_STATE_FLOAT8_E4M3_BLOCK, "MLFW_STATE_FLOAT8_E4M3_BLOCK", StateFormat::Float8E4M3Block}}}};

constexpr EnumMap<mlfw_master_format, MasterFormat, 3> kMasterFormats{
    "mlfw_master_format",
    {{{MLFW_MASTERS_FLOAT32, "MLFW_MASTERS_FLOAT32", MasterFormat::Float32},
      {MLFW_MASTERS_BFLOAT16_STOCHASTIC_ROUNDING, "MLFW_MASTERS_BFLOAT16_STOCHASTIC_ROUNDING",
       MasterFormat::BFloat16StochasticRounding},
      {MLFW_MASTERS_BFLOAT16_REMAINDER, "MLFW_MASTERS_BFLOAT16_REMAINDER", MasterFormat::BFloat16Remainder}}}};

// The C++ options the fields of mlfw_state_options become, in Adam's options and in SGD's.
constexpr std::array<FieldName, 5> kAdamStateNames{{{"first", "FirstMomentFormat"},
                                                    {"second", "SecondMomentFormat"},
                                                    {"block_size", "StateBlockSize"},
                                                    {"masters", "Masters"},
                                                    {"rounding_seed", "RoundingSeed"}}};
constexpr std::array<FieldName, 4> kSGDStateNames{{{"first", "MomentumFormat"},
                                                   {"block_size", "StateBlockSize"},
                                                   {"masters", "Masters"},
                                                   {"rounding_seed", "RoundingSeed"}}};

// The fields of @p states Adam and SGD share: the block size and the masters.
template <class Options>
Options WithBlocksAndMasters(Options options, const mlfw_state_options& states) {
  options.StateBlockSize = states.block_size;
  options.Masters = kMasterFormats.ToCpp(states.masters, "states->masters");
  options.RoundingSeed = states.rounding_seed;
  return options;
}

// The caller's @p states onto Adam's options (the C++ constructor checks the combination).
optimizers::AdamOptions WithStates(optimizers::AdamOptions options, const mlfw_state_options& states) {
  options.FirstMomentFormat = kStateFormats.ToCpp(states.first, "states->first");
  options.SecondMomentFormat = kStateFormats.ToCpp(states.second, "states->second");
  return WithBlocksAndMasters(options, states);
}

// The same for SGD, whose one state is `first`.
optimizers::SGDOptions WithStates(optimizers::SGDOptions options, const mlfw_state_options& states) {
  options.MomentumFormat = kStateFormats.ToCpp(states.first, "states->first");
  if (kStateFormats.ToCpp(states.second, "states->second") != StateFormat::Float32) {
    throw ArgumentError("states->second", std::to_string(EnumValue(states.second)) +
                                              " is not MLFW_STATE_FLOAT32: SGD keeps one state, the momentum "
                                              "(states->first)");
  }
  return WithBlocksAndMasters(options, states);
}

// A list of the fused steps as C++ names it (OptimizerStepLists: `lists.FirstState`) and the C
// argument the caller passed it as.
struct ListName {
  std::string_view cpp;
  const char* c;
};

// @p text with each C++ list of @p names it holds (`lists.FirstState`, not `lists.FirstStateScales`)
// replaced by the caller's argument.
std::string WithCListNames(std::string text, std::initializer_list<ListName> names) {
  for (const ListName& name : names) {
    for (std::size_t at = text.find(name.cpp); at != std::string::npos; at = text.find(name.cpp, at)) {
      const std::size_t end = at + name.cpp.size();
      if (end < text.size() && std::isalnum(static_cast<unsigned char>(text[end])) != 0) {
        at = end;
        continue;
      }
      text.replace(at, name.cpp.size(), name.c);
      at += std::string_view(name.c).size();
    }
  }
  return text;
}

// Runs @p step (FusedAdamStep, FusedSGDStep); an error naming one of the C++ lists of @p names,
// or an entry of one (`lists.Gradients[1]`), in its parameter or its message (a second entry:
// `is the same memory as lists.Parameters[0]`), is thrown again naming the caller's arguments
// (`gradients[1]`): a C caller has no `lists`.
template <class Step>
void WithArgumentNames(std::initializer_list<ListName> names, Step&& step) {
  try {
    std::forward<Step>(step)();
  } catch (const ArgumentError& error) {
    const std::string& parameter = error.Parameter();
    const std::string renamed = WithCListNames(parameter, names);
    if (dynamic_cast<const ArgumentNullError*>(&error) != nullptr) {
      if (renamed == parameter) {
        throw;
      }
      throw ArgumentNullError(renamed);
    }
    // what() is "invalid argument '<parameter>': <message>"
    const std::string what = error.what();
    const std::string head = "invalid argument '" + parameter + "': ";
    const std::string message = what.starts_with(head) ? what.substr(head.size()) : what;
    const std::string renamed_message = WithCListNames(message, names);
    if (renamed == parameter && renamed_message == message) {
      throw;
    }
    throw ArgumentError(renamed, renamed_message);
  }
}

// Builds the handle around the optimizer @p make creates from the parameters' map.
template <class Make>
mlfw_status Create(const char* const* names, const DLTensor* const* parameters, size_t count, mlfw_optimizer_t* out,
                   Make&& make) {
  return Call([&] {
    Deref(out, "out");
    NamedTensors lent;
    const GradientMap& map = lent.Read(names, parameters, count, "parameters");
    auto handle = std::make_unique<mlfw_optimizer>();
    handle->device = DeviceOf(map);
    make(*handle, map);
    *out = handle.release();
  });
}

}  // namespace
}  // namespace mlframework::c_api

extern "C" {

mlfw_status mlfw_adam_options_default(mlfw_adam_options* options) {
  return Call(
      [&] { Deref(options, "options") = mlframework::c_api::kAdamFields.ToC(mlframework::optimizers::AdamOptions{}); });
}

mlfw_status mlfw_sgd_options_default(mlfw_sgd_options* options) {
  return Call(
      [&] { Deref(options, "options") = mlframework::c_api::kSGDFields.ToC(mlframework::optimizers::SGDOptions{}); });
}

mlfw_status mlfw_adam_create(const char* const* names, const DLTensor* const* parameters, size_t count,
                             const mlfw_adam_options* options, mlfw_optimizer_t* out) {
  return mlframework::c_api::Create(names, parameters, count, out, [&](mlfw_optimizer& handle, const auto& map) {
    mlframework::c_api::WithCNames({{"options", mlframework::c_api::kAdamFields.Names()}}, [&] {
      handle.adam = std::make_unique<mlframework::optimizers::Adam>(
          map, mlframework::c_api::kAdamFields.ToCpp(Deref(options, "options"), "options"));
    });
  });
}

mlfw_status mlfw_sgd_create(const char* const* names, const DLTensor* const* parameters, size_t count,
                            const mlfw_sgd_options* options, mlfw_optimizer_t* out) {
  return mlframework::c_api::Create(names, parameters, count, out, [&](mlfw_optimizer& handle, const auto& map) {
    mlframework::c_api::WithCNames({{"options", mlframework::c_api::kSGDFields.Names()}}, [&] {
      handle.sgd = std::make_unique<mlframework::optimizers::SGD>(
          map, mlframework::c_api::kSGDFields.ToCpp(Deref(options, "options"), "options"));
    });
  });
}

mlfw_status mlfw_state_options_default(mlfw_state_options* options) {
  return Call([&] {
    const mlframework::optimizers::AdamOptions defaults;
    mlfw_state_options& out = Deref(options, "options");
    out = mlfw_state_options{};
    out.first = mlframework::c_api::kStateFormats.ToC(defaults.FirstMomentFormat);
    out.second = mlframework::c_api::kStateFormats.ToC(defaults.SecondMomentFormat);
    out.block_size = defaults.StateBlockSize;
    out.masters = mlframework::c_api::kMasterFormats.ToC(defaults.Masters);
    out.rounding_seed = defaults.RoundingSeed;
  });
}

mlfw_status mlfw_adam_create_with_states(const char* const* names, const DLTensor* const* parameters, size_t count,
                                         const mlfw_adam_options* options, const mlfw_state_options* states,
                                         mlfw_optimizer_t* out) {
  return mlframework::c_api::Create(names, parameters, count, out, [&](mlfw_optimizer& handle, const auto& map) {
    mlframework::c_api::WithCNames(
        {{"options", mlframework::c_api::kAdamFields.Names()}, {"states", mlframework::c_api::kAdamStateNames}}, [&] {
          handle.adam = std::make_unique<mlframework::optimizers::Adam>(
              map, mlframework::c_api::WithStates(
                       mlframework::c_api::kAdamFields.ToCpp(Deref(options, "options"), "options"),
                       Deref(states, "states")));
        });
  });
}

mlfw_status mlfw_sgd_create_with_states(const char* const* names, const DLTensor* const* parameters, size_t count,
                                        const mlfw_sgd_options* options, const mlfw_state_options* states,
                                        mlfw_optimizer_t* out) {
  return mlframework::c_api::Create(names, parameters, count, out, [&](mlfw_optimizer& handle, const auto& map) {
    mlframework::c_api::WithCNames(
        {{"options", mlframework::c_api::kSGDFields.Names()}, {"states", mlframework::c_api::kSGDStateNames}}, [&] {
          handle.sgd = std::make_unique<mlframework::optimizers::SGD>(
              map,
              mlframework::c_api::WithStates(mlframework::c_api::kSGDFields.ToCpp(Deref(options, "options"), "options"),
                                             Deref(states, "states")));
        });
  });
}

void mlfw_optimizer_destroy(mlfw_optimizer_t optimizer) {
  delete optimizer;  // NOLINT(cppcoreguidelines-owning-memory): the handle mlfw_*_create made
}

mlfw_status mlfw_optimizer_set_gradients(mlfw_optimizer_t optimizer, const char* const* names,
                                         const DLTensor* const* gradients, size_t count) {
  return Call([&] {
    mlfw_optimizer& handle = Deref(optimizer, "optimizer");
    handle.Optimizer().SetGradients(handle.gradients.Read(names, gradients, count, "gradients"));
    handle.gradients.Commit();
  });
}

mlfw_status mlfw_optimizer_step(mlfw_optimizer_t optimizer, void* stream) {
  return Call([&] {
    mlfw_optimizer& handle = Deref(optimizer, "optimizer");
    const mlframework::c_api::StreamScope scope(stream, handle.device);
    handle.Optimizer().Step();
  });
}

mlfw_status mlfw_optimizer_set_learning_rate(mlfw_optimizer_t optimizer, double learning_rate) {
  return Call([&] {
    mlfw_optimizer& handle = Deref(optimizer, "optimizer");
    if (handle.adam) {
      handle.adam->SetLearningRate(learning_rate);
    } else {
      handle.sgd->SetLearningRate(learning_rate);
    }
  });
}

mlfw_status mlfw_optimizer_step_count(mlfw_optimizer_t optimizer, int64_t* steps) {
  return Call([&] {
    const mlfw_optimizer& handle = Deref(optimizer, "optimizer");
    int64_t& result = Deref(steps, "steps");
    result = handle.adam ? handle.adam->StepCount() : handle.sgd->StepCount();
  });
}

mlfw_status mlfw_optimizer_state_dict(mlfw_optimizer_t optimizer, void* buffer, size_t capacity, size_t* size) {
  return mlframework::c_api::SaveState(
      optimizer, "optimizer", buffer, capacity, size,
      [](const mlfw_optimizer& handle) { return handle.adam ? handle.adam->StateDict() : handle.sgd->StateDict(); });
}

mlfw_status mlfw_optimizer_load_state_dict(mlfw_optimizer_t optimizer, const void* data, size_t size) {
  return mlframework::c_api::LoadState(optimizer, "optimizer", data, size, [](mlfw_optimizer& handle, auto bytes) {
    if (handle.adam) {
      handle.adam->LoadStateDict(bytes);
    } else {
      handle.sgd->LoadStateDict(bytes);
    }
  });
}

mlfw_status mlfw_fused_adam_step(const DLTensor* const* parameters, const DLTensor* const* gradients,
                                 const DLTensor* const* exp_avg, const DLTensor* const* exp_avg_sq, size_t count,
                                 const mlfw_adam_options* options, int64_t step, void* stream) {
  return Call([&] {
    const mlframework::AdamStepScalars scalars =
        mlframework::c_api::WithCNames({{"options", mlframework::c_api::kAdamFields.Names()}}, [&] {
          return mlframework::optimizers::AdamStepScalarsFor(
              mlframework::c_api::kAdamFields.ToCpp(Deref(options, "options"), "options"), step);
        });
    const auto params = BorrowList(parameters, count, "parameters");
    const auto grads = BorrowList(gradients, count, "gradients");
    const auto first = BorrowList(exp_avg, count, "exp_avg");
    const auto second = BorrowList(exp_avg_sq, count, "exp_avg_sq");
    const mlframework::c_api::StreamScope scope(stream, DeviceOf(params));
    mlframework::c_api::WithArgumentNames(
        {{"lists.Parameters", "parameters"},
         {"lists.Gradients", "gradients"},
         {"lists.FirstState", "exp_avg"},
         {"lists.SecondState", "exp_avg_sq"}},
        [&] {
          mlframework::optimizers::FusedAdamStep(
              {.Parameters = params, .Gradients = grads, .FirstState = first, .SecondState = second}, scalars);
        });
  });
}

mlfw_status mlfw_fused_sgd_step(const DLTensor* const* parameters, const DLTensor* const* gradients,
                                const DLTensor* const* momentum_buffers, size_t count, const mlfw_sgd_options* options,
                                int first_step, void* stream) {
  return Call([&] {
    const mlframework::SGDStepScalars scalars =
        mlframework::c_api::WithCNames({{"options", mlframework::c_api::kSGDFields.Names()}}, [&] {
          return mlframework::optimizers::SGDStepScalarsFor(
              mlframework::c_api::kSGDFields.ToCpp(Deref(options, "options"), "options"), first_step != 0);
        });
    const auto params = BorrowList(parameters, count, "parameters");
    const auto grads = BorrowList(gradients, count, "gradients");
    const auto buffers = momentum_buffers == nullptr ? std::vector<mlframework::TensorPtr>{}
                                                     : BorrowList(momentum_buffers, count, "momentum_buffers");
    const mlframework::c_api::StreamScope scope(stream, DeviceOf(params));
    mlframework::c_api::WithArgumentNames({{"lists.Parameters", "parameters"},
                                           {"lists.Gradients", "gradients"},
                                           {"lists.FirstState", "momentum_buffers"}},
                                          [&] {
                                            mlframework::optimizers::FusedSGDStep(
                                                {.Parameters = params, .Gradients = grads, .FirstState = buffers},
                                                scalars);
                                          });
  });
}

}  // extern "C"
