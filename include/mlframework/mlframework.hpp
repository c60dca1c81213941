#pragma once
/// @file mlframework.hpp
/// @brief Umbrella header: everything a training loop needs.

#include <mlframework/config.hpp>

#include <mlframework/core/BFloat16.hpp>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float16.hpp>
#include <mlframework/core/Float8.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Headroom.hpp>
#include <mlframework/core/HostConversion.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/core/OverflowLogger.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/core/Threads.hpp>
#include <mlframework/core/TrainingCsvWriter.hpp>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/ScalePolicy.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>

// amp
#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/amp/GradScalerContext.hpp>
#include <mlframework/amp/GradScalerFactory.hpp>
#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/amp/ScaleFactor.hpp>
#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/amp/StepMode.hpp>

// optimizers
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>
#include <mlframework/optimizers/SGD.hpp>

// optimizers::mixed_precision
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

// fp8: scaling recipes (Transformer Engine's DelayedScaling and current scaling, OCP MXFP8) and
// core's rule of their fused scale update
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/fp8/Format.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>
#include <mlframework/fp8/MXFP8BlockScaling.hpp>
#include <mlframework/fp8/PerTensorScaling.hpp>

// distributed and distributed::fsdp (MpiProcessGroup.hpp has no MPI types: the same in every
// build; its constructors throw BackendError where MLFW_HAS_MPI is 0)
#include <mlframework/distributed/AbortGuard.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>
