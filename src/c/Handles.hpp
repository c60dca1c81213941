#pragma once
// What the C API's opaque handles hold: the C++ objects, and the caller's tensors as views.

#include <memory>

#include <mlframework/c/grad_scaler.h>
#include <mlframework/c/optimizers.h>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "Tensors.hpp"

/// An optimizers::Adam or optimizers::SGD (exactly one is set) and the gradients lent to it.
struct mlfw_optimizer {
  std::unique_ptr<mlframework::optimizers::Adam> adam;
  std::unique_ptr<mlframework::optimizers::SGD> sgd;
  mlframework::c_api::NamedTensors gradients;
  mlframework::Device device;  // of the parameters

  /// The optimizer, through the interface GradScaler steps.
  mlframework::amp::IOptimizer& Optimizer() const {
    return adam ? static_cast<mlframework::amp::IOptimizer&>(*adam) : *sgd;
  }
};

/// A GradScaler and the device of the tensors it saw last (for the stream of mlfw_grad_scaler_update()).
struct mlfw_grad_scaler {
  explicit mlfw_grad_scaler(mlframework::amp::GradScaler s) : scaler(std::move(s)) {}
  mlframework::amp::GradScaler scaler;
  mlframework::Device device;
};
