#pragma once
// The docs' snippet functions that main.cpp runs or that are compiled only (they need an MPI
// rank, a GPU or files on disk).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/mlframework.hpp>

#include "Model.hpp"

// README.md (training_loop.cpp)
void Train(Model& model, int steps);

// docs/loss-scaling.md (loss_scaling.cpp)
void TrainTwoOptimizers(Model& embeddings, Model& rest, int steps);
void TrainAccumulating(Model& model, int steps);
void TrainWithOwnBackward(Model& model, int steps);

// docs/conversion-layer.md (conversion_layer.cpp)
void TrainWithConversionLayer(Model& model, int steps);

// docs/cpu-backend.md (threads.cpp)
void LeaveTheCoresToTheFramework();

// docs/diagnostics.md (diagnostics.cpp)
void WatchOverflows(mlframework::amp::GradScaler& scaler, std::ostream& log, std::ostream& csv_file);
void PrintDiagnostics(const mlframework::amp::GradScaler& scaler, std::ostream& log);
void FollowTheFramework(mlframework::amp::GradScaler& scaler, std::int64_t global_step,
                        std::vector<std::string> parameter_names);

// README.md and docs/own-tensors.md (own_tensors.cpp; own_tensors_cuda.cpp is compiled only)
mlframework::TensorPtr WrapHost(std::vector<mlframework::Float16>& grad, std::size_t rows, std::size_t cols,
                                std::shared_ptr<void> keep_alive);
mlframework::TensorPtr Import(DLManagedTensor* managed);
DLManagedTensor* Export(const mlframework::TensorPtr& unscaled);

// docs/fp8.md (fp8.cpp)
std::vector<mlframework::TensorPtr> Float8Casts();
float CastToFloat8(std::span<const mlframework::TensorPtr> weights, std::span<const mlframework::TensorPtr> fp8,
                   std::span<const mlframework::TensorPtr> decoded, const mlframework::TensorPtr& scale,
                   const mlframework::TensorPtr& scale_inv, const mlframework::TensorPtr& amax);
std::vector<std::byte> TrainFc1InFp8(const mlframework::TensorPtr& weight, const mlframework::TensorPtr& grad_out,
                                     int steps);
std::vector<std::uint8_t> WeightInMxfp8(const mlframework::TensorPtr& weight, const mlframework::TensorPtr& w8);
mlframework::TensorPtr GatherInFp8(std::shared_ptr<mlframework::distributed::IProcessGroup> world,
                                   const mlframework::TensorPtr& w, mlframework::fp8::IScalingRecipe& recipe);

// docs/fsdp.md (fsdp.cpp)
std::int64_t SaveAndResume(mlframework::distributed::fsdp::FSDP& fsdp, mlframework::optimizers::Adam& adam,
                           mlframework::amp::GradScaler& scaler);
void ReduceOverTheFloat8Wire(const std::shared_ptr<mlframework::distributed::IProcessGroup>& world,
                             const mlframework::GradientMap& params);
void AccumulateSharded(const std::shared_ptr<mlframework::distributed::IProcessGroup>& world,
                       const mlframework::GradientMap& params);
