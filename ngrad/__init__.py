"""ngrad: PyTorch's autograd API on a lazy, compiling engine.

>>> import ngrad as torch
>>> x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
>>> y = (x.sin() * x).sum()
>>> y.backward()
>>> x.grad
tensor([0.9182, 1.3818, 0.0770], dtype=ngrad.float64)
"""

import builtins as _builtins
import functools as _functools

from . import autograd, cuda, distributed, fft, func, linalg, nn, optim, random, scipy, utils
from ._version import __version__
from .autograd.anomaly_mode import is_anomaly_check_nan_enabled, is_anomaly_enabled
from .contract import einsum, inner, tensordot
from .control import scan
from .engine.ir.dtypes import DType as dtype
from .engine.ir.dtypes import bool_ as bool  # noqa: A001  (PyTorch spells it ngrad.bool)
from .engine.ir.dtypes import float32, float64, get_default_dtype, int32, int64, set_default_dtype
from .engine.runtime import get_num_threads, set_num_threads, synchronize_compiles
from .factories import (
    arange,
    as_tensor,
    bernoulli,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    initial_seed,
    is_tensor,
    linspace,
    manual_seed,
    normal,
    numel,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    seed,
    tensor,
    zeros,
    zeros_like,
)
from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .random import Generator, default_generator, get_rng_state, set_rng_state
from .serialization import load, save
from .tensor import Size, Tensor, cat, concat, concatenate, device, matmul, meshgrid, nonzero, pow, stack, where
from .tensor import complex_ops as _complex_ops
from .tensor import linalg_ops as _linalg_ops
from .tensor import scatter_ops as _scatter_ops
from .tensor import select_ops as _select_ops
from .tensor.functions import as_strided_scatter, diagonal_scatter, select_scatter, slice_scatter
from .tensor.layout import contiguous_format, preserve_format
from .tensor.reduce_ops import std_mean, var_mean
from .tracing import TraceError, compile  # noqa: A004  (PyTorch spells it ngrad.compile)

float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001
half = None


def _function(name):
    method = getattr(Tensor, name)

    @_functools.wraps(method)
    def f(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            input = tensor(input)
        return method(input, *args, **kwargs)

    f.__qualname__ = name
    f.__module__ = "ngrad"
    return f


_METHODS = """abs absolute add sub mul multiply div divide true_divide neg negative exp log log1p expm1 log2 log10 sqrt
rsqrt reciprocal square sin cos tan asin acos atan arcsin arccos arctan sinh cosh tanh sigmoid relu erf sign
floor ceil round trunc fix frac exp2 remainder fmod floor_divide atan2 arctan2 logaddexp maximum minimum clamp clip
clamp_min clamp_max sum mean prod amax amin argmax argmin max min var std norm logsumexp softmax log_softmax
cumsum reshape flatten squeeze unsqueeze permute transpose swapaxes swapdims t flip roll narrow diagonal diag
trace split chunk unbind select gather index_select mm bmm mv dot outer lt le gt ge eq ne less less_equal
greater greater_equal not_equal logical_and logical_or logical_not isnan any all detach clone broadcast_to
addcmul addcdiv lerp equal masked_fill tril triu isinf isfinite nan_to_num cross movedim moveaxis diff
unflatten tile take_along_dim addmm inverse det sort argsort topk as_strided is_inference""".split()
_FAMILIES = (_complex_ops, _linalg_ops, _scatter_ops, _select_ops)
for _name in _METHODS + [name for family in _FAMILIES for name in family.FUNCTIONS]:
    globals()[_name] = _function(_name)
for _family in _FAMILIES:
    globals().update({_name: getattr(_family, _name) for _name in _family.__all__})
subtract = globals()["sub"]


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when all values agree within ``atol + rtol * |other|``."""
    import numpy as np

    return _builtins.bool(
        np.allclose(input.detach().numpy(), other.detach().numpy(), rtol=rtol, atol=atol, equal_nan=equal_nan)
    )


def result_type(tensor1, tensor2):
    from .tensor.record import operands

    return operands(tensor1 if isinstance(tensor1, Tensor) else tensor(tensor1), tensor2)[2]


def softplus(input, beta=1.0, threshold=20.0):
    return input.softplus(beta, threshold)
