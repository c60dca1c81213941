#pragma once
/// @file PrefetchPolicy.hpp
/// @brief What FSDP's hooks start ahead of time (PyTorch FSDP's forward_prefetch / BackwardPrefetch).

namespace mlframework::distributed::fsdp {

/// Which collectives FSDP's hooks overlap with the framework's compute (FSDP::SetPrefetch()).
/// Both off by default: the hooks then gather and reduce one unit at a time, as the manual API.
struct PrefetchPolicy {
  /// FSDP::PreForward(i) starts the all-gather of unit i + 1 (PyTorch's forward_prefetch,
  /// Megatron's overlap_param_gather): it runs during unit i's forward.
  bool Forward = false;
  /// FSDP::PreBackward(i) starts the all-gather of unit i - 1 (PyTorch's BACKWARD_PRE), and
  /// FSDP::PostBackward(i) starts unit i's gradient reduction without waiting, so that it runs
  /// during unit i - 1's backward (DeepSpeed's overlap_comm, Megatron's overlap_grad_reduce).
  bool Backward = false;
};

}  // namespace mlframework::distributed::fsdp
