"""Bad input reaches Python as one clear exception naming what was expected; Ctrl-C stops long calls."""
import ctypes
import os
import signal
import threading

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import tessel
import tessel.gnn as tg
import tessel.sched as ts
import tessel.torch  # noqa: F401


@pytest.fixture(scope="module")
def handle():
    return tg.SpmmHandle(sp.random(50, 50, density=0.1, format="csr", dtype=np.float32, random_state=0), "csr")


def test_wrong_dtype(handle):
    with pytest.raises(TypeError, match=r"X must be float32, got float64 array of shape \(50, 4\)"):
        handle.apply(np.ones((50, 4)))
    with pytest.raises(TypeError, match="X must be float32, got int64"):
        handle.apply(torch.ones(50, 4, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"tessel.spmm: x must be float32, got torch.float64"):
        torch.ops.tessel.spmm(torch.ones(50, 4, dtype=torch.float64), tessel.torch.gnn.register_handle(handle))


def test_non_contiguous(handle):
    with pytest.raises(ValueError, match=r"C-contiguous .* strides \(1, 50\)"):
        handle.apply(np.ones((4, 50), np.float32).T)
    with pytest.raises(ValueError, match=r"C-contiguous .* strides \(8, 2\)"):
        handle.apply(torch.ones(50, 8)[:, ::2])


def test_mismatched_shapes(handle):
    with pytest.raises(ValueError, match=r"X must have shape \(50, \*\), got float32 array of shape \(49, 4\)"):
        handle.apply(np.ones((49, 4), np.float32))
    with pytest.raises(ValueError, match=r"X must have 2 dimensions"):
        handle.apply(np.ones(50, np.float32))
    with pytest.raises(ValueError, match=r"the output must have shape \(50, 4\)"):
        handle.apply(np.ones((50, 4), np.float32), out=np.empty((50, 3), np.float32))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


class FakeCudaArray:
    """A DLPack producer that says its float32 (rows, cols) data live on cuda:0 (the pointer is never read):
    what a CUDA tensor looks like to the binding, on a machine without a GPU."""

    def __init__(self, rows, cols):
        self.shape = (ctypes.c_int64 * 2)(rows, cols)
        self.managed = _DLManagedTensor()
        self.managed.dl_tensor = _DLTensor(ctypes.c_void_p(0x1000), _DLDevice(2, 0), 2, _DLDataType(2, 32, 1),
                                           self.shape, None, 0)
        self.deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda p: None)
        self.managed.deleter = self.deleter

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, **kwargs):
        make = ctypes.pythonapi.PyCapsule_New
        make.restype = ctypes.py_object
        make.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return make(ctypes.addressof(self.managed), b"dltensor", None)


def test_gpu_array_on_a_host_build(handle):
    if tessel.has_cuda:
        pytest.skip("this build has the CUDA layer")
    with pytest.raises(TypeError, match=r"must be in CPU memory, got float32 array of shape \(50, 4\).* on cuda:0; "
                                        r"this Tessel was built without its CUDA layer"):
        handle.apply(FakeCudaArray(50, 4), out=np.empty((50, 4), np.float32))


def test_gpu_array_refused_by_host_operations(handle):
    with pytest.raises(TypeError, match=r"must be in CPU memory, got float32 array .* on cuda:0"):
        handle.apply(FakeCudaArray(50, 4), out=np.empty((50, 4), np.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensor(handle):
    with pytest.raises(TypeError, match="cuda"):
        handle.apply(torch.ones(50, 4, device="cuda"))


def test_unknown_names():
    with pytest.raises(ValueError, match=r"unknown model 'gpt__1T' \(known: .*gpt__1.3B"):
        ts.estimate("gpt__1T", 16, "a100", 1, 4, [(4, 1)])
    with pytest.raises(ValueError, match=r"GPU type 'b200' is not in the cluster \(its types: a100, v100, a40, a10\)"):
        ts.best("gpt__1.3B", 16, "b200", 1, 4)
    with pytest.raises(tessel.Error, match="unknown policy|policy"):
        ts.simulate(_tiny_trace(), policies=["bogus"])


def _tiny_trace(iterations=200000):
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, "trace.csv")
    with open(path, "w") as f:
        f.write("job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n")
        for i in range(30):
            f.write(f"j{i},{i * 60},{iterations},gpt__1.3B,-1,128,{1 << (i % 4)},a100\n")
    return ts.load_trace(path)


def test_missing_file():
    with pytest.raises(tessel.Error, match="no-such-file.h5"):
        tg.load_dataset("/tmp/no-such-file.h5")


def _interrupt_after(seconds):
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_ctrl_c_stops_training():
    rng = np.random.default_rng(0)
    a = sp.random(3000, 3000, density=0.003, format="csr", dtype=np.float32, random_state=1)
    data = tg.make_dataset(a, rng.standard_normal((3000, 32)).astype(np.float32), np.arange(3000) % 5, None,
                           np.arange(3000) % 3 == 0, np.arange(3000) % 3 == 1, np.arange(3000) % 3 == 2)
    timer = _interrupt_after(1.0)
    with pytest.raises(KeyboardInterrupt):
        tg.train(data, epochs=1000000, patience=0)
    timer.join()


def test_ctrl_c_stops_simulation():
    timer = _interrupt_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        # Jobs that never end: the simulation would run its safety cap of rounds.
        ts.simulate(_tiny_trace(10**13), policies=["fcfs"], max_rounds=100000000)
    timer.join()
