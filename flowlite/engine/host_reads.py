"""Host reads computed on the host: `int(ix[k])`, `i + block_size` of materialised data.

Layer: engine — imports buckets, graph_key, host_data, host_eval, ir, runtime. A host read of a
pending value that is a few exact steps from materialised data is computed in numpy (host_eval)
instead of compiling an executable per index; what was read that way is committed as data only
when something would otherwise lose it (commit_host_read).
"""
from __future__ import annotations

import weakref

import jax
import numpy as np

from . import buckets, host_eval, ir
from .host_data import HostNode
from .graph_key import forget
from .runtime import rt

_DATA = ir.DATA


# ---- host reads computed on the host -------------------------------------------------------
# an accelerator's array is copied to the host whole for such reads (JAX keeps that copy for
# the next read) when it is at most this big: ~1 ms of copy instead of a program per index
_HOST_VIEW_MAX_DEVICE_BYTES = 16 << 20


def host_view(n):
    """The value of pending `n` computed on the host when it is a few exact steps from
    materialised data (host_eval: `int(ix[k])`, `i + block_size`): exact, and no executable
    to compile for every new index; else None (the caller syncs).  What was read this way
    is committed (a later in-place write or failed sync can't take it back: commit_host_read)."""
    if n.op is buckets.UNPAD:      # a bucketed output: its padded buffer, sliced
        v = n.inputs[0].value
        if n.inputs[0].op is not _DATA or not isinstance(v, jax.Array) or v.is_deleted():
            return None
        return np.asarray(v)[tuple(slice(0, d) for d in n.shape)]
    if n.device is None or n.device.type == "mesh":
        return None
    v = _host_read.get(n)
    if v is not None:
        return v
    got = host_eval.value(n, _host_leaf)
    if got is None:
        return None
    v, computed = got
    if computed:
        _host_read[n] = v
    return v


# nodes whose value a host read computed on the host (host_view): committed as data only when
# something would otherwise lose that value — an in-place write rebinding its tensor, or a
# failed sync — so the index arithmetic of a Python loop (`i + block_size`) costs no transfer
_host_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def commit_host_read(n) -> bool:
    """Make pending `n` data holding the value a host read computed for it, if one did."""
    v = _host_read.pop(n, None)
    if v is None or n.op is _DATA:
        return False
    forget(n, rt.local.stream)
    n.op, n.inputs, n.attrs = _DATA, (), ()
    n.value = jax.device_put(v, n.device.jax_device)
    n.sig = ir.intern_sig((_DATA, (), n.shape, n.dtype, 0))
    return True


def _host_leaf(n):
    """The host array of materialised node n: a CPU array read in place, an accelerator's
    one up to _HOST_VIEW_MAX_DEVICE_BYTES; None otherwise."""
    if n.__class__ is HostNode:
        return n.host
    if n.device is None or n.device.type == "mesh":
        return None
    v = n.value
    if not isinstance(v, jax.Array) or v.is_deleted() or len(v.devices()) != 1:
        return None
    if n.device.type != "cpu" and v.nbytes > _HOST_VIEW_MAX_DEVICE_BYTES:
        return None
    return np.asarray(v)
