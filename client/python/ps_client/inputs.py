"""Checks and conversions of what callers pass to the client: a bad input raises
InvalidArgumentError (a ValueError) naming what is wrong, before anything is sent."""

import numpy as np

from . import errors
from .options import DenseUpdate


def as_keys(keys):
    a = np.asarray(keys)
    if a.ndim != 1:
        raise errors.InvalidArgumentError("keys must be a 1-D array, got shape %s" % (a.shape,))
    if a.size == 0:
        return np.empty(0, dtype=np.uint64)
    if a.dtype.kind not in "ui":
        raise errors.InvalidArgumentError("keys must be integers (uint64), got dtype %s" % a.dtype)
    if a.dtype.kind == "i" and a.min() < 0:
        raise errors.InvalidArgumentError("keys must be non-negative, got %d" % a.min())
    return np.ascontiguousarray(a, dtype="<u8")


def as_floats(values, what):
    a = np.asarray(values)
    if a.dtype.kind not in "fiu":
        raise errors.InvalidArgumentError("%s must be real numbers, got dtype %s" % (what, a.dtype))
    return np.ascontiguousarray(a, dtype="<f4")


def as_grads(grads, n, info):
    g = as_floats(grads, "gradients of table \"%s\"" % info.name)
    if g.shape != (n, info.dim):
        raise errors.InvalidArgumentError(
            "push of %d keys of dim %d needs gradients of shape (%d, %d), got %s" %
            (n, info.dim, n, info.dim, g.shape))
    if not np.isfinite(g).all():
        raise errors.InvalidArgumentError("push to table \"%s\" has a NaN or Inf gradient; "
                                          "nothing was applied" % info.name)
    return g


def as_size(size):
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise errors.InvalidArgumentError("size must be a positive integer, got %r" % (size,))
    return int(size)


def as_dense_kind(kind):
    try:
        return DenseUpdate(kind.value if isinstance(kind, DenseUpdate) else kind)
    except ValueError:
        raise errors.InvalidArgumentError(
            "kind must be DenseUpdate.ASSIGN/\"assign\" or DenseUpdate.GRADIENT/\"gradient\", "
            "got %r" % (kind,)) from None
