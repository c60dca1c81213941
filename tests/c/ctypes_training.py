"""The C API from Python with ctypes alone: NumPy arrays handed over through DLPack
(ndarray.__dlpack__), a dynamic GradScaler and SGD stepping them, checked against the same
iteration computed with NumPy; then Adam with 8-bit moments (mlfw_state_options, read through
its C layout).

    python3 ctypes_training.py <path of libmlframework_c.so>
"""
import ctypes
import sys

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DynamicScalerConfig(ctypes.Structure):
    _fields_ = [("initial_scale", ctypes.c_float), ("growth_factor", ctypes.c_float),
                ("backoff_factor", ctypes.c_float), ("growth_interval", ctypes.c_int),
                ("min_scale", ctypes.c_float), ("max_scale", ctypes.c_float),
                ("hysteresis", ctypes.c_int), ("enabled", ctypes.c_int)]


class SgdOptions(ctypes.Structure):
    _fields_ = [("learning_rate", ctypes.c_double), ("momentum", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("dampening", ctypes.c_double),
                ("nesterov", ctypes.c_int)]


class AdamOptions(ctypes.Structure):
    _fields_ = [("learning_rate", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("epsilon", ctypes.c_double), ("weight_decay", ctypes.c_double),
                ("decoupled_weight_decay", ctypes.c_int)]


class StateOptions(ctypes.Structure):
    _fields_ = [("first", ctypes.c_int), ("second", ctypes.c_int), ("block_size", ctypes.c_size_t),
                ("masters", ctypes.c_int), ("rounding_seed", ctypes.c_uint64)]


MLFW_STATE_INT8_BLOCK = 3
MLFW_STATE_UINT8_BLOCK = 4


class DLPackView:
    """The DLTensor of a NumPy array, taken from its DLPack capsule (kept alive with it)."""

    _get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    _get_pointer.restype = ctypes.c_void_p
    _get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

    def __init__(self, array):
        self.array = array
        self.capsule = array.__dlpack__()
        managed = ctypes.cast(self._get_pointer(self.capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
        self.tensor = ctypes.pointer(managed.contents.dl_tensor)


def main(library_path):
    lib = ctypes.CDLL(library_path)
    lib.mlfw_last_error.restype = ctypes.c_char_p
    lib.mlfw_grad_scaler_get_scale.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)]

    def ok(status):
        if status != 0:
            raise RuntimeError(f"status {status}: {lib.mlfw_last_error().decode()}")

    assert lib.mlfw_api_version() >= 1

    config = DynamicScalerConfig()
    ok(lib.mlfw_dynamic_scaler_config_default(ctypes.byref(config)))
    config.initial_scale = 256.0
    config.growth_interval = 3
    scaler = ctypes.c_void_p()
    ok(lib.mlfw_grad_scaler_create_dynamic(ctypes.byref(config), ctypes.byref(scaler)))

    rng = np.random.default_rng(7)
    weights = rng.standard_normal(64).astype(np.float32)
    target = rng.standard_normal(64).astype(np.float32)
    gradients = np.zeros_like(weights)
    names = (ctypes.c_char_p * 1)(b"w")
    weight_view = DLPackView(weights)
    gradient_view = DLPackView(gradients)
    parameters = (ctypes.POINTER(DLTensor) * 1)(weight_view.tensor)
    grads = (ctypes.POINTER(DLTensor) * 1)(gradient_view.tensor)

    options = SgdOptions()
    ok(lib.mlfw_sgd_options_default(ctypes.byref(options)))
    options.learning_rate = 0.1
    sgd = ctypes.c_void_p()
    ok(lib.mlfw_sgd_create(names, parameters, ctypes.c_size_t(1), ctypes.byref(options), ctypes.byref(sgd)))

    reference = weights.copy()
    reference_scale = np.float32(256.0)
    clean = 0
    overflow_at = {2, 5}
    for iteration in range(10):
        scale = ctypes.c_float()
        ok(lib.mlfw_grad_scaler_get_scale(scaler, ctypes.byref(scale)))
        assert scale.value == reference_scale, (iteration, scale.value, reference_scale)

        loss = np.array([0.5 * np.sum((weights - target) ** 2)], dtype=np.float32)
        loss_view = DLPackView(loss)
        scaled = ctypes.POINTER(DLManagedTensor)()
        ok(lib.mlfw_grad_scaler_scale(scaler, loss_view.tensor, None, ctypes.byref(scaled)))
        scaled_value = ctypes.cast(scaled.contents.dl_tensor.data, ctypes.POINTER(ctypes.c_float))[0]
        assert scaled_value == np.float32(loss[0] * reference_scale), (scaled_value, loss[0])
        scaled.contents.deleter(scaled)

        gradients[:] = reference_scale * (weights - target)  # backward of the scaled loss
        if iteration in overflow_at:
            gradients[3] = np.inf
        scaled_gradients = gradients.copy()  # the step unscales the FP32 gradients in place
        ok(lib.mlfw_optimizer_set_gradients(sgd, names, grads, ctypes.c_size_t(1)))
        stepped = ctypes.c_int(-1)
        ok(lib.mlfw_grad_scaler_step(scaler, sgd, 0, None, ctypes.byref(stepped)))

        # The same iteration in NumPy: skip and back off on Inf, else unscale and step.
        if iteration in overflow_at:
            assert stepped.value == 0
            reference_scale = np.float32(reference_scale * 0.5)
            clean = 0
        else:
            assert stepped.value == 1
            unscaled = scaled_gradients * np.float32(1.0 / float(reference_scale))
            reference -= np.float32(0.1) * unscaled
            clean += 1
            if clean == 3:
                reference_scale = np.float32(reference_scale * 2.0)
                clean = 0
        np.testing.assert_allclose(weights, reference, rtol=1e-6, atol=1e-6)

    scale = ctypes.c_float()
    ok(lib.mlfw_grad_scaler_get_scale(scaler, ctypes.byref(scale)))
    assert scale.value == reference_scale

    # Errors come back as a status and a message, not as a crash.
    bad = np.zeros(4, dtype=np.int32)
    bad_view = DLPackView(bad)
    status = lib.mlfw_grad_scaler_scale(scaler, bad_view.tensor, None, ctypes.byref(scaled))
    assert status == 1, status
    assert b"'loss->dtype'" in lib.mlfw_last_error(), lib.mlfw_last_error()

    lib.mlfw_optimizer_destroy(sgd)
    lib.mlfw_grad_scaler_destroy(scaler)
    state_ratio = low_bit_adam(lib, ok)
    print(f"ctypes training ok (scale {scale.value}, weights match NumPy; 8-bit Adam state {state_ratio:.2f}x FP32's)")


def low_bit_adam(lib, ok):
    """Adam with 8-bit moments in blocks of 128 through mlfw_state_options, against FP32 moments:
    the same loss falls, the state blob shrinks, a bad block size is refused."""
    assert lib.mlfw_api_version() >= 2
    defaults = StateOptions()
    ok(lib.mlfw_state_options_default(ctypes.byref(defaults)))
    assert (defaults.first, defaults.second, defaults.block_size, defaults.masters, defaults.rounding_seed) == \
        (0, 0, 256, 0, 0)

    rng = np.random.default_rng(11)
    target = rng.standard_normal(1000).astype(np.float32)
    options = AdamOptions()
    ok(lib.mlfw_adam_options_default(ctypes.byref(options)))
    options.learning_rate = 0.05
    names = (ctypes.c_char_p * 1)(b"w")
    results = {}
    for label, first, second in (("fp32", 0, 0), ("8bit", MLFW_STATE_INT8_BLOCK, MLFW_STATE_UINT8_BLOCK)):
        weights = np.zeros(1000, dtype=np.float32)
        gradients = np.zeros_like(weights)
        weight_view, gradient_view = DLPackView(weights), DLPackView(gradients)
        parameters = (ctypes.POINTER(DLTensor) * 1)(weight_view.tensor)
        grads = (ctypes.POINTER(DLTensor) * 1)(gradient_view.tensor)
        states = StateOptions()
        ok(lib.mlfw_state_options_default(ctypes.byref(states)))
        states.first, states.second, states.block_size = first, second, 128
        adam = ctypes.c_void_p()
        ok(lib.mlfw_adam_create_with_states(names, parameters, ctypes.c_size_t(1), ctypes.byref(options),
                                            ctypes.byref(states), ctypes.byref(adam)))
        for _ in range(30):
            gradients[:] = weights - target
            ok(lib.mlfw_optimizer_set_gradients(adam, names, grads, ctypes.c_size_t(1)))
            ok(lib.mlfw_optimizer_step(adam, None))
        size = ctypes.c_size_t()
        ok(lib.mlfw_optimizer_state_dict(adam, None, ctypes.c_size_t(0), ctypes.byref(size)))
        results[label] = (float(0.5 * np.sum((weights - target) ** 2)), size.value)
        lib.mlfw_optimizer_destroy(adam)

        states.block_size = 100
        refused = ctypes.c_void_p()
        status = lib.mlfw_adam_create_with_states(names, parameters, ctypes.c_size_t(1), ctypes.byref(options),
                                                  ctypes.byref(states), ctypes.byref(refused))
        assert status == 1 and b"100" in lib.mlfw_last_error(), (status, lib.mlfw_last_error())
        assert refused.value is None

    initial = float(0.5 * np.sum(target ** 2))
    assert results["8bit"][0] < 0.5 * initial, (results, initial)
    assert abs(results["8bit"][0] - results["fp32"][0]) < 0.1 * results["fp32"][0] + 1.0, results
    assert results["8bit"][1] < 0.6 * results["fp32"][1], results
    return results["8bit"][1] / results["fp32"][1]


if __name__ == "__main__":
    main(sys.argv[1])
