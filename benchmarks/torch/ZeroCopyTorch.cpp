// libtorch's own unscale + overflow check on the very memory bench_zero_copy wraps, in the same
// binary and iteration: at::from_blob tensors made once, as a libtorch program's gradients.
// Built only when CMake finds Torch and MLFW_BENCH_TORCH is ON.
#include <omp.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "../bench_zero_copy.hpp"

namespace mlfw_zc {

Contender TorchUnscaleCheck(std::string& note) {
  at::set_num_threads(omp_get_max_threads());  // the library's OpenMP team: libtorch may pick fewer
  auto tensors = std::make_shared<std::vector<at::Tensor>>();
  for (const ExternalGradient& g : External(mlframework::DataType::Float32)) {
    std::vector<std::int64_t> shape(g.shape.begin(), g.shape.end());
    tensors->push_back(at::from_blob(g.data, shape, at::TensorOptions().dtype(at::kFloat)));
  }
  auto found_inf = std::make_shared<at::Tensor>(at::zeros({1}, at::kFloat));
  const at::Tensor inv_scale = at::ones({1}, at::kFloat);
  const std::string version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  const std::string threads = ", " + std::to_string(at::get_num_threads()) + " threads";
  try {
    at::_amp_foreach_non_finite_check_and_unscale_(*tensors, *found_inf, inv_scale);
    note = "torch: at::_amp_foreach_non_finite_check_and_unscale_ (libtorch " + version + ")" + threads;
    return Contender{"torch",
                     [tensors, found_inf, inv_scale] {
                       // A fresh found_inf per step, read on the host as torch's GradScaler.step does.
                       found_inf->zero_();
                       at::_amp_foreach_non_finite_check_and_unscale_(*tensors, *found_inf, inv_scale);
                       if (found_inf->item<float>() != 0.0f) {
                         throw std::runtime_error("torch: finite gradients reported as overflow");
                       }
                     },
                     false,
                     {}};
  } catch (const c10::Error&) {
    // libtorch before 2.x has this operator for CUDA only: time what a CPU user writes instead.
    note = "torch: no CPU _amp_foreach_non_finite_check_and_unscale_ in libtorch " + version +
           "; _foreach_mul_ + isfinite(t).all() per tensor" + threads;
    return Contender{"torch",
                     [tensors] {
                       at::_foreach_mul_(*tensors, 1.0);
                       bool found = false;
                       for (const at::Tensor& t : *tensors) {
                         found = found || !at::isfinite(t).all().item<bool>();
                       }
                       if (found) {
                         throw std::runtime_error("torch: finite gradients reported as overflow");
                       }
                     },
                     false,
                     {}};
  }
}

}  // namespace mlfw_zc
