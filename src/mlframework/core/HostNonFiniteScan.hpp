#pragma once
// Private: the host implementation of TensorBackend::ScanNonFinite (one tensor).

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

namespace mlframework::detail {

/// The non-finite values of @p tensor: a bit-level scan of its HostBytes() when it has them
/// (FP32, FP16, BF16), else of its elements widened by CopyToFloats(). One read of the tensor.
NonFiniteScan HostScanNonFinite(const ITensor& tensor);

}  // namespace mlframework::detail
