"""The C API from Python with ctypes alone: NumPy arrays handed over through DLPack
(ndarray.__dlpack__), a dynamic GradScaler and SGD stepping them, checked against the same
iteration computed with NumPy.

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
    print(f"ctypes training ok (scale {scale.value}, weights match NumPy)")


if __name__ == "__main__":
    main(sys.argv[1])
