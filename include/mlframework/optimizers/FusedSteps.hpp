#pragma once
/// @file FusedSteps.hpp
/// @brief Fused multi-tensor Adam/AdamW and SGD steps over lists of FP32 tensors.
///
/// One pass over memory per step: each element's parameter, gradient and state are read once and
/// the parameter and state written once, optionally with the FP16/BF16 copy of the updated
/// parameter (OptimizerStepLists::LowPrecisionCopies). On the CPU the lists run on the vectorised
/// kernels of the instruction set the CPU backend chose, threaded over chunks with OpenMP; on a
/// device backend the step is that backend's TensorBackend::AdamStep() / SGDStep().
///
/// Numerics: the results are bit-identical to `torch.optim.Adam/AdamW/SGD(foreach=False)` on the
/// CPU (torch 2.15) under the matching CPU capability (on the AVX2 and portable kernels Adam's
/// weights can differ by a few ulp: torch's sqrt is MKL's, which only the AVX-512 kernels
/// reproduce), and to optimizers::Adam / optimizers::SGD:
/// torch's single-tensor ops in its order, fused multiply-adds where torch's AVX2/AVX-512 kernels
/// fuse them (the CPU backend's AVX2/AVX-512 kernels, CUDA) and none on the portable kernels
/// (torch's default capability), a correctly rounded square root and division (AdamStepScalars).

#include <cstdint>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/export.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

namespace mlframework::optimizers {

/// The constants of Adam step @p step (1 for the first) under @p options: the bias corrections in
/// double, as PyTorch computes them. ArgumentError for invalid options or a step below 1.
MLFRAMEWORK_EXPORT AdamStepScalars AdamStepScalarsFor(const AdamOptions& options, std::int64_t step);

/// The constants of an SGD step under @p options; @p first_step: the momentum buffers start as
/// the first step's `d`. ArgumentError for invalid options.
MLFRAMEWORK_EXPORT SGDStepScalars SGDStepScalarsFor(const SGDOptions& options, bool first_step);

/// One fused Adam/AdamW step over @p lists (Parameters, Gradients, FirstState = exp_avg,
/// SecondState = exp_avg_sq, optional LowPrecisionCopies).
///
/// When @p skip_if_found_inf is not null and its found-inf flag is set, nothing is read or written:
/// for host-memory lists the flag is read on the host (a device state's flag is read back, which
/// waits for the device) and a set flag means no pass at all (returns false); a device backend reads
/// its state's flag on the device without the host waiting (returns true: the device decides).
/// With a step count (OptimizerStepLists::StepCount) the step runs as step `count + 1`: its bias
/// corrections come from scalars.BiasCorrection and the count (scalars.StepSize and
/// BiasCorrection2Sqrt are not used), and the count goes up by one only when the step is taken
/// (host lists: here, after the found-inf read; device lists: on the device, so a warmed-up step
/// with a device state's flag waits for nothing and can be captured in a CUDA graph).
/// ArgumentError (nothing written) for lists of different lengths, a null entry, a tensor that is
/// not FP32 (copies: not FP16/BF16), element counts that differ within an entry, or tensors on
/// different backends, for a step count that is not one FP32 element beside the lists or, in
/// host memory, not a whole number from 0 to 2^24 - 1 (a device count is not read by the host),
/// and for a tensor the step writes (a parameter, state, scale, remainder, copy or the count) that
/// shares memory with any other tensor of the call, naming both entries: a parameter listed twice
/// would be updated twice, a state over another entry read after it changed. Gradients are only
/// read: one gradient may serve two parameters. Host tensors are compared by their bytes, device
/// tensors as objects (one object twice);
/// InvalidOperationError when the tensors' backend has no fused step.
/// An empty list is a step with nothing to do (true); it still counts.
MLFRAMEWORK_EXPORT bool FusedAdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars,
                                      const DeviceScaleState* skip_if_found_inf = nullptr);

/// One fused SGD step over @p lists (Parameters, Gradients, FirstState = momentum buffers when
/// scalars.Momentum > 0, else empty; SecondState empty; optional LowPrecisionCopies); the found-inf
/// flag, the step count (with one, scalars.FirstStep is the count being 0), the errors and the
/// return value as FusedAdamStep().
MLFRAMEWORK_EXPORT bool FusedSGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars,
                                     const DeviceScaleState* skip_if_found_inf = nullptr);

}  // namespace mlframework::optimizers
