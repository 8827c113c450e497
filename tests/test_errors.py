"""User errors raise a clear Python exception at the call that caused them — naming the op and
the offending shapes/dtypes/devices — never a JAX/XLA error from inside a later sync."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flowlite as fl
import flowlite.frontend.ops as F

# every check here is a new program by design; flowlite's recompile advice doesn't apply
pytestmark = pytest.mark.filterwarnings("ignore:flowlite.*recompiled:UserWarning")


def _raises(exc, fn, *fragments):
    """`fn()` raises `exc` at the call, and the message contains every fragment."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in error message {msg!r}"
    return msg


def test_errors_are_raised_at_the_call_not_at_sync():
    a, b = fl.zeros(3, 4), fl.zeros(5, 4)
    before = fl.metrics.counters()["syncs"]
    with pytest.raises(ValueError):
        a + b
    assert fl.metrics.counters()["syncs"] == before     # nothing was run to find out
    fl.sync()                                           # and the failed op left nothing behind


def test_binary_broadcasting_errors():
    a = fl.zeros(3, 4)
    _raises(ValueError, lambda: a + fl.zeros(5, 4), "add", "(3, 4)", "(5, 4)")
    _raises(ValueError, lambda: a * fl.zeros(3), "mul", "(3, 4)", "(3,)")
    _raises(ValueError, lambda: fl.zeros(2, 1, 3) - fl.zeros(4, 2), "sub", "(2, 1, 3)", "(4, 2)")
    _raises(ValueError, lambda: a / fl.ones(2, 4), "div", "(3, 4)", "(2, 4)")
    _raises(ValueError, lambda: a < fl.ones(2), "lt", "(3, 4)", "(2,)")
    _raises(ValueError, lambda: fl.maximum(a, fl.zeros(2)), "maximum", "(3, 4)", "(2,)")
    _raises(ValueError, lambda: fl.where(fl.zeros(3, dtype=fl.bool), a, 1.0), "where", "(3,)",
            "(3, 4)")
    _raises(ValueError, lambda: a.masked_fill(fl.zeros(5, dtype=fl.bool), 1.0), "masked_fill",
            "(3, 4)", "(5,)")
    _raises(ValueError, lambda: a.expand(3, 5), "(3, 4)", "(3, 5)")
    _raises(ValueError, lambda: a.broadcast_to((4, 4)), "broadcast_to", "(3, 4)", "(4, 4)")
    with pytest.raises(ValueError):
        a += fl.zeros(5, 4)


def test_matmul_errors():
    _raises(ValueError, lambda: fl.zeros(3, 4) @ fl.zeros(5, 6), "matmul", "(3, 4)", "(5, 6)",
            "not aligned")
    _raises(ValueError, lambda: fl.matmul(fl.zeros(3), fl.zeros(4)), "matmul", "(3,)", "(4,)")
    _raises(RuntimeError, lambda: fl.zeros(()) @ fl.zeros(4), "matmul", "at least 1D")
    _raises(ValueError, lambda: fl.zeros(2, 3, 4) @ fl.zeros(3, 4, 5), "matmul", "(2, 3, 4)",
            "(3, 4, 5)")
    _raises(ValueError, lambda: fl.bmm(fl.zeros(3, 4), fl.zeros(4, 5)), "bmm", "(3, 4)",
            "(4, 5)")
    _raises(ValueError, lambda: fl.bmm(fl.zeros(2, 3, 4), fl.zeros(3, 4, 5)), "bmm",
            "(2, 3, 4)", "(3, 4, 5)")
    _raises(ValueError, lambda: fl.dot(fl.zeros(3, 4), fl.zeros(3)), "dot", "(3, 4)")
    _raises(ValueError, lambda: fl.einsum("ij,jk->ik", fl.zeros(3, 4), fl.zeros(5, 4)),
            "einsum", "(3, 4)", "(5, 4)")
    _raises(ValueError, lambda: fl.einsum("ijk->i", fl.zeros(3, 4)), "einsum", "(3, 4)")
    _raises(ValueError, lambda: fl.einsum("ij,jk->ik", fl.zeros(3, 4)), "einsum", "2 operands")


def test_reshape_errors():
    a = fl.zeros(3, 4)
    _raises(ValueError, lambda: a.reshape(5, 3), "reshape", "[5, 3]", "12", "(3, 4)")
    _raises(ValueError, lambda: a.view(-1, 5), "reshape", "[-1, 5]", "(3, 4)")
    _raises(ValueError, lambda: a.reshape(-1, -1), "reshape", "only one dimension")
    _raises(ValueError, lambda: a.unflatten(1, (3, 2)), "unflatten", "(3, 2)", "(3, 4)")
    _raises(ValueError, lambda: a.repeat(2), "repeat")
    _raises(ValueError, lambda: a.permute(1, 0, 2), "permute", "(3, 4)")
    _raises(ValueError, lambda: a.permute(0, 0), "permute", "(0, 0)")
    _raises(ValueError, lambda: a.split([1, 2], 1), "split", "[1, 2]", "(3, 4)")
    _raises(IndexError, lambda: a.narrow(1, 2, 5), "narrow", "(3, 4)")
    _raises(ValueError, lambda: a.chunk(0), "chunk")
    _raises(ValueError, lambda: fl.zeros(3).tril(), "tril")
    _raises(ValueError, lambda: F.pad(a, (1, 2, 3)), "pad", "3")


def test_cat_stack_errors():
    a = fl.zeros(3, 4)
    _raises(ValueError, lambda: fl.cat([a, fl.zeros(3, 5)], 0), "cat", "(3, 4)", "(3, 5)")
    _raises(ValueError, lambda: fl.cat([a, fl.zeros(3)], 1), "cat", "(3, 4)", "(3,)")
    _raises(ValueError, lambda: fl.cat([fl.zeros(()), fl.zeros(())]), "cat", "zero-dim")
    _raises(ValueError, lambda: fl.cat([]), "cat")
    _raises(ValueError, lambda: fl.stack([a, fl.zeros(5, 4)]), "stack", "(3, 4)", "(5, 4)")
    _raises(IndexError, lambda: fl.cat([a, a], 2), "cat", "range")
    _raises(IndexError, lambda: fl.stack([a, a], 3), "stack", "range")


def test_bad_dim_errors():
    a = fl.zeros(3, 4)
    for name, fn in [("sum", lambda: a.sum(2)), ("mean", lambda: a.mean(-3)),
                     ("max", lambda: a.max(2)), ("amin", lambda: a.amin(2)), ("argmax", lambda: a.argmax(2)),
                     ("var", lambda: a.var(5)), ("cumsum", lambda: a.cumsum(2)),
                     ("softmax", lambda: a.softmax(-3)), ("log_softmax", lambda: a.log_softmax(2)),
                     ("transpose", lambda: a.transpose(0, 3)), ("squeeze", lambda: a.squeeze(5)),
                     ("unsqueeze", lambda: a.unsqueeze(4)), ("flip", lambda: a.flip(2)),
                     ("split", lambda: a.split(2, 3)), ("unbind", lambda: a.unbind(2)),
                     ("gather", lambda: a.gather(2, fl.zeros(3, 4, dtype=fl.int32))),
                     ("index_select", lambda: a.index_select(2, fl.tensor([0]))),
                     ("narrow", lambda: a.narrow(2, 0, 1)), ("size", lambda: a.size(2))]:
        msg = _raises(IndexError, fn, name)
        assert "range" in msg, msg


def test_bad_index_errors():
    a = fl.zeros(3, 4)
    _raises(IndexError, lambda: a[fl.tensor([0.0, 1.0])], "index", "float32")
    _raises(IndexError, lambda: a[np.array([0.5])], "index", "float64")
    _raises(IndexError, lambda: a[3], "index 3", "size 3")
    _raises(IndexError, lambda: a[:, -5], "index -5", "size 4")
    _raises(IndexError, lambda: a[0, 0, 0], "too many indices", "(3, 4)")
    _raises(IndexError, lambda: a[fl.zeros(2, dtype=fl.bool)], "mask", "(2,)", "(3, 4)")
    _raises(IndexError, lambda: a[..., ...], "ellipsis")
    _raises(ValueError, lambda: a[::-1], "step")
    _raises(TypeError, lambda: a.gather(1, fl.zeros(3, 1)), "gather", "float32")
    _raises(TypeError, lambda: a.index_select(0, fl.tensor([1.0])), "index_select", "float32")
    _raises(TypeError, lambda: a.scatter_add(0, fl.zeros(1, 4), a), "scatter_add", "float32")
    _raises(TypeError, lambda: a.take_along_dim(fl.zeros(3, 1), 1), "take_along_dim", "float32")
    _raises(TypeError, lambda: a.masked_fill(fl.zeros(3, 4), 1.0), "masked_fill", "float32",
            "(3, 4)")
    _raises(TypeError, lambda: fl.one_hot(a, 3), "one_hot", "float32")
    _raises(ValueError, lambda: a.gather(0, fl.zeros(4, dtype=fl.int32)), "gather", "(4,)",
            "(3, 4)")
    _raises(ValueError, lambda: a.scatter_add(0, fl.zeros(4, dtype=fl.int32), a), "scatter_add",
            "(4,)", "(3, 4)")
    _raises(ValueError, lambda: a.index_select(0, fl.zeros(2, 2, dtype=fl.int32)),
            "index_select", "(2, 2)")

    def setitem():
        a[0] = fl.zeros(5)
    _raises(ValueError, setitem, "setitem", "(5,)", "(4,)")

    def setitem_float_index():
        a[fl.tensor([0.5])] = 1.0
    _raises(IndexError, setitem_float_index, "index", "float32")


def test_dtype_and_autograd_misuse_errors():
    a = fl.zeros(3, 4)
    _raises(TypeError, lambda: a & a, "and", "float32")
    _raises(TypeError, lambda: a | a, "or", "float32")
    _raises(TypeError, lambda: ~a, "bitwise_not", "float32")
    _raises(TypeError, lambda: -fl.zeros(2, dtype=fl.bool), "neg", "bool")
    _raises(TypeError, lambda: fl.zeros(2, dtype=fl.int32).mean(), "mean", "int32")
    _raises(ValueError, lambda: fl.tensor([2, 3]) ** -1, "pow", "int32", "-1")
    _raises(RuntimeError, lambda: fl.zeros(2, dtype=fl.int32).requires_grad_(), "int32")
    _raises(RuntimeError, lambda: fl.zeros(2, requires_grad=True).mul(2).backward(), "scalar",
            "(2,)")
    _raises(RuntimeError, lambda: fl.zeros(()).backward(), "does not require grad")
    _raises(ValueError, lambda: a.item(), "item", "(3, 4)")
    _raises(RuntimeError, lambda: bool(a), "ambiguous", "(3, 4)")
    _raises(ValueError, lambda: a.clamp(), "clamp")
    _raises(TypeError, lambda: fl.zeros(2, dtype="complex64"), "complex64")
    _raises(TypeError, lambda: fl.rand(2, dtype=fl.int32), "floating")
    _raises(ValueError, lambda: F._conv_raw(fl.zeros(1, 3, 5, 5), fl.zeros(2, 4, 3, 3),
                                            ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1)),
            "conv", "(1, 3, 5, 5)", "(2, 4, 3, 3)")
    _raises(ValueError, lambda: fl.zeros(2, device="xpu"), "xpu")


_DEVICE_SCRIPT = textwrap.dedent("""
    import flowlite as fl
    a = fl.tensor([1.0, 2.0], device="cpu:0")
    b = fl.tensor([3.0, 4.0], device="cpu:1")
    # PyTorch's names: the first CPU device prints as "cpu", a further one with its index
    assert str(a.device) == "cpu" and str(b.device) == "cpu:1", (a.device, b.device)
    msgs = []
    for fn in (lambda: a + b, lambda: a @ b, lambda: fl.cat([a, b]),
               lambda: fl.where(a > 0, a, b), lambda: a[fl.tensor([0], device="cpu:1")]):
        try:
            fn()
        except RuntimeError as e:
            msgs.append(str(e))
        else:
            raise SystemExit("mixing devices did not raise")
    for m in msgs:
        assert "same device" in m and ("cpu and cpu:1" in m or "cpu:1 and cpu" in m), m
    assert msgs[0].startswith("add") and msgs[1].startswith("matmul"), msgs
    # an explicit copy makes the op legal; results stay on their device
    c = b.to("cpu:0")
    assert (a + c).tolist() == [4.0, 6.0] and str((a + c).device) == "cpu"
    assert (b * 2).tolist() == [6.0, 8.0] and str((b * 2).device) == "cpu:1"
    print("OK")
""")


def test_device_mixing_raises_naming_both_devices():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2")
    env["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
