"""Tessel from Python: graph aggregation and GNN training (``tessel.gnn``), the MoE layer (``tessel.moe``,
``tessel.torch.moe``) and the cluster scheduler's simulator and estimator (``tessel.sched``).

The core binding takes any array that speaks DLPack (NumPy, PyTorch CPU tensors, ...) without copying it where
its dtype, layout and device fit, and refuses the others with an error that names what was expected.
``tessel.torch`` registers PyTorch operators (``torch.ops.tessel.*``) with fake kernels and autograd formulas.

Importing tessel initializes MPI (when the process was started by an MPI launcher such as ``mpiexec``) and
Kokkos; both are finalized at interpreter exit. Under MPI with more than one rank, an uncaught exception on one
rank ends every rank of the job (as ``python -m mpi4py`` does), so that no rank waits for it.
"""
import atexit as _atexit
import sys as _sys

from . import _tessel
from ._tessel import CommunicationError, Error, TimeoutError, UsageError, build_summary  # noqa: A004

__version__ = _tessel.__version__
has_cuda = _tessel.has_cuda
has_mpi = _tessel.has_mpi

_tessel.initialize()
_atexit.register(_tessel.finalize)


def world():
    """``(rank, size)`` of the MPI world: ``(0, 1)`` without an MPI launcher."""
    return _tessel.world()


def allreduce_(array):
    """Sums a contiguous float32 or float64 array (NumPy, a CPU tensor, any DLPack array) over the ranks of the MPI
    world, in place, and returns it: e.g. the gradients of parameters every rank holds a replica of. Collective:
    every rank calls it with an array of the same size and dtype."""
    if type(array).__module__.split(".")[0] == "torch":
        contiguous = array.is_contiguous()
        flat = array.detach().view(-1) if contiguous else None
    else:
        flags = getattr(array, "flags", None)
        contiguous = flags is None or flags.c_contiguous
        flat = array.reshape(-1) if contiguous else None
    if not contiguous:
        raise ValueError("tessel.allreduce_: the array must be C-contiguous (it is summed in place)")
    _tessel.allreduce_(flat)
    return array


def _abort_on_uncaught(previous):
    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        _sys.stderr.flush()
        _sys.stdout.flush()
        _tessel.abort(1)

    return hook


if _tessel.world()[1] > 1:
    _sys.excepthook = _abort_on_uncaught(_sys.excepthook)

__all__ = ["CommunicationError", "Error", "TimeoutError", "UsageError", "allreduce_", "build_summary", "world",
           "__version__"]
