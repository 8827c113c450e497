"""torch.amp / torch.cuda.amp, torch.compile(model) and torch.distributed's process-group
names, as ported scripts (nanoGPT's train.py) use them."""
import numpy as np
import pytest
import torch

import flowlite as fl
from flowlite import amp


def test_cuda_autocast_changes_nothing_and_says_so():
    # CPU autocast is real (tests/test_autocast.py); PyTorch's CUDA lists are not implemented
    x = fl.randn(3, 4)
    amp._said["autocast"] = False
    with pytest.warns(UserWarning, match="has no effect"):
        with fl.amp.autocast(device_type="cuda", dtype=fl.bfloat16):
            y = x @ x.T
    assert y.dtype == fl.float32

    @fl.amp.autocast()
    def f(a):
        return a * 2
    np.testing.assert_array_equal(f(x).numpy(), x.numpy() * 2)


def test_grad_scaler_disables_itself_without_a_gpu_like_torch(monkeypatch):
    monkeypatch.setattr(amp, "_gpu_available", lambda: False)   # as on a CPU-only machine
    with pytest.warns(UserWarning, match="Disabling"):
        s = fl.cuda.amp.GradScaler(enabled=True)
    assert not s.is_enabled()
    w = fl.tensor([1.0, 2.0], requires_grad=True)
    opt = fl.optim.SGD([w], lr=0.5)
    loss = (w * w).sum()
    assert s.scale(loss) is loss
    s.scale(loss).backward()
    s.unscale_(opt)
    s.step(opt)
    s.update()
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])


def _pair(grad_scale):
    """One SGD step through flowlite's and torch's (CPU) GradScaler, enabled."""
    out = []
    for lib in (fl, torch):
        w = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        if lib is fl:
            amp._gpu_available = lambda: True
            try:
                s = fl.amp.GradScaler(init_scale=1024.0, growth_interval=1)
            finally:
                from flowlite.compat.cuda import is_available
                amp._gpu_available = is_available
        else:
            s = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
        loss = (w * w).sum() * grad_scale
        s.scale(loss).backward()
        s.step(opt)
        s.update()
        out.append((w.detach().numpy().copy(), s.get_scale()))
    return out


def test_enabled_grad_scaler_matches_torch():
    (fw, fs), (tw, ts) = _pair(1.0)
    np.testing.assert_allclose(fw, tw, rtol=1e-6)
    assert fs == ts == 2048.0                       # grown after a good step
    (fw, fs), (tw, ts) = _pair(float("inf"))        # overflow: step skipped, scale backs off
    np.testing.assert_array_equal(fw, tw)
    assert fs == ts == 512.0


def test_torch_compile_of_a_module_is_the_module():
    m = fl.nn.Linear(2, 3)
    assert fl.compile(m) is m
    assert fl.compile(m, mode="max-autotune", fullgraph=True) is m
    f = lambda x: x + 1                             # noqa: E731
    assert fl.compile(f, disable=True) is f
    with pytest.raises(TypeError, match="unexpected arguments"):
        fl.compile(f, bogus=1)


def test_process_group_names_in_one_process():
    import flowlite.distributed as dist
    assert dist.is_available() and not dist.is_initialized()
    assert dist.get_rank() == 0 and dist.get_world_size() == 1
    dist.destroy_process_group()                    # a no-op when not initialised
    with pytest.raises(ValueError, match="init_method"):
        dist.init_process_group("gloo", init_method="tcp://1.2.3.4:5")
