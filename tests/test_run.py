"""`python -m flowlite.run script.py`: unchanged PyTorch-style scripts on flowlite.

Each script runs in a fresh interpreter (the test process has the real torch imported as
the oracle, and the hook refuses to mix the two).  The scripts are self-written stand-ins
for the idioms of pytorch/examples (mnist, dcgan, vae) and minGPT's trainer: tiny data,
no downloads.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch  # noqa: F401  (the real one: install() must refuse to mix it with the hook)

import flowlite as fl
from flowlite import run as flrun

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(tmp_path, source, *args, name="script.py", timeout=240):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "flowlite.run", str(script), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


# One script exercising the idioms of mnist/main.py, dcgan/main.py, vae/main.py and minGPT's
# trainer.py together (one interpreter start instead of four).
EXAMPLES_SCRIPT = '''
import argparse
import sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.parallel
import torch.backends.cudnn as cudnn
import torch.optim as optim
import torch.utils.data
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data.dataloader import DataLoader as DL2
from torch.utils.data.distributed import DistributedSampler

assert __name__ == "__main__"
assert DL2 is DataLoader
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--no-accel", action="store_true")
parser.add_argument("--ngpu", type=int, default=1)
args = parser.parse_args()
print("argv", sys.argv[1:])

torch.manual_seed(1)
cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
use_accel = not args.no_accel and torch.accelerator.is_available()
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
print("device", device.type, torch.cuda.is_available(), torch.cuda.device_count())
print("cudnn", cudnn.is_available(), cudnn.benchmark)


class Digits(Dataset):                       # a map-style dataset returning tensors
    def __init__(self, n):
        g = np.random.default_rng(0)
        self.x = g.standard_normal((n, 1, 8, 8)).astype(np.float32)
        self.y = g.integers(0, 10, n)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), int(self.y[i])


kwargs = {"batch_size": 16, "num_workers": 2, "persistent_workers": True,
          "pin_memory": True, "shuffle": True}
train_loader = torch.utils.data.DataLoader(Digits(64), **kwargs)
test_loader = DataLoader(Digits(32), batch_size=32)


class Net(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(nn.Conv2d(1, 4, 3, 1), nn.ReLU(), nn.Flatten(),
                                  nn.Linear(144, 10))

    def forward(self, x):
        if (x.is_cuda or x.is_xpu) and self.ngpu > 1:
            out = nn.parallel.data_parallel(self.main, x, range(self.ngpu))
        else:
            out = self.main(x)
        return F.log_softmax(out, dim=1)


def weights_init(m):
    if m.__class__.__name__.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)


model = Net(args.ngpu).to(device)
model.apply(weights_init)
optimizer = optim.Adam(model.parameters(), lr=1e-2)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, args.epochs + 1):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    scheduler.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            pred = model(data.to(device)).argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view(pred.shape)).sum().item()
    print("epoch", epoch, "loss", round(loss.item(), 4), "correct", correct)

# minGPT trainer.py: RandomSampler with replacement and a huge num_samples
from torch.utils.data.dataloader import DataLoader as MinGPTLoader
ds = TensorDataset(torch.arange(40).reshape(20, 2), torch.arange(20))
sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=int(1e10))
it = iter(MinGPTLoader(ds, sampler=sampler, shuffle=False, pin_memory=True, batch_size=4,
                       num_workers=1))
x, y = next(it)
assert tuple(x.shape) == (4, 2) and tuple(y.shape) == (4,)
del it
dsamp = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)
print("dist", list(dsamp)[:3], len(dsamp))
wrapped = nn.DataParallel(model)
assert wrapped.module is model and list(wrapped.state_dict())[0].startswith("module.")
torch.save(model.state_dict(), "net.pt")
print("reloaded", sorted(torch.load("net.pt")) == sorted(model.state_dict()))
print("done")
'''


def test_examples_idioms_run_unchanged(tmp_path):
    r = _run(tmp_path, EXAMPLES_SCRIPT, "--epochs", "2", "--ngpu", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "argv ['--epochs', '2', '--ngpu', '2']" in out
    assert "device cpu False 0" in out            # this machine: JAX has no GPU backend
    assert "cudnn False True" in out
    assert out.count("epoch ") == 2
    assert "dist [1, 3, 5] 10" in out            # PyTorch's DistributedSampler split
    assert "reloaded True" in out and out.rstrip().endswith("done")
    assert "terminate called" not in r.stderr


ERRORS_SCRIPT = '''
import torch, torch.nn as nn
for stmt in ["import torch.sparse", "from torch.nn import NoSuchLayer", "import torch._C",
             "torch.no_such_function", "import torch.distributed.fsdp"]:
    try:
        exec(stmt)
    except (ImportError, AttributeError) as e:
        print(type(e).__name__, "|", e)
    else:
        print("NO ERROR for", stmt)
import flowlite
assert torch.nn.Linear is flowlite.nn.Linear and torch.Tensor is flowlite.Tensor
torch.backends.cudnn.deterministic = True
assert flowlite.backends.cudnn.deterministic is True     # writes reach flowlite
import sys
assert "torch" in sys.modules and not hasattr(sys.modules["torch"], "_C")
import torch.fft                 # mapped: its transforms say they are not implemented
try:
    torch.fft.rfft(torch.ones(4))
except NotImplementedError as e:
    print("NotImplementedError |", e)
print("ok")
raise SystemExit(torch.tensor([3]).item())      # the script's exit status is the run's
'''


def test_missing_torch_names_fail_clearly(tmp_path):
    r = _run(tmp_path, ERRORS_SCRIPT)
    assert r.returncode == 3, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert "NO ERROR" not in r.stdout
    assert lines[0].startswith("ModuleNotFoundError | flowlite has no equivalent of the "
                               "PyTorch module 'torch.sparse'")
    assert lines[1].startswith("ImportError | cannot import name 'NoSuchLayer' from 'torch.nn'")
    assert "'torch._C'" in lines[2]
    assert lines[3].startswith("AttributeError | flowlite has no equivalent of "
                               "torch.no_such_function")
    assert "'torch.distributed'" in lines[4]
    assert lines[5].startswith("NotImplementedError | flowlite: torch.fft.rfft is not "
                               "implemented")
    assert lines[-1] == "ok"


DTYPES_SCRIPT = '''
import numpy as np, torch
x = torch.zeros(2, dtype=torch.double) + 1e-12
print(x.dtype, torch.tensor([1, 2]).dtype, torch.tensor([1.5]).dtype, torch.arange(3).dtype,
      torch.from_numpy(np.ones(2)).dtype, torch.nn.Linear(2, 2).double().weight.dtype,
      repr((x + 1).sum().item()))
'''


def test_cli_gives_pytorch_its_64_bit_dtypes(tmp_path):
    r = _run(tmp_path, DTYPES_SCRIPT)
    assert r.returncode == 0, r.stderr[-3000:]
    # (dtypes print PyTorch's names while the script imports flowlite as torch)
    assert r.stdout.split() == ["torch.float64", "torch.int64", "torch.float32",
                                "torch.int64", "torch.float64", "torch.float64",
                                "2.000000000002"]
    env = dict(os.environ, PYTHONPATH=ROOT, FLOWLITE_X64="0")
    off = subprocess.run([sys.executable, "-m", "flowlite.run", str(tmp_path / "script.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert off.returncode == 0, off.stderr[-3000:]
    assert off.stdout.split()[:2] == ["torch.float32", "torch.int32"]


def test_cli_usage(tmp_path, capsys):
    assert flrun.main([str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert flrun.main([]) == 2 and "usage:" in capsys.readouterr().err
    assert not flrun.installed()


def test_resolve_maps_torch_names_without_the_hook():
    assert flrun.resolve("torch.nn.functional.relu") is fl.nn.functional.relu
    assert flrun.resolve("torch.utils.data.DataLoader") is fl.data.DataLoader
    assert flrun.resolve("torch.optim.lr_scheduler.StepLR") is fl.optim.lr_scheduler.StepLR
    assert flrun.resolve("torch.backends.cudnn") is fl.backends.cudnn
    with pytest.raises(AttributeError, match="torch.nn.NoSuchLayer"):
        flrun.resolve("torch.nn.NoSuchLayer")
    with pytest.raises(RuntimeError, match="real PyTorch is already imported"):
        flrun.install()                  # this test process imported torch (the oracle)


def test_import_flowlite_as_torch_reaches_the_namespaces():
    import flowlite as torch
    assert torch.utils.data.DataLoader is fl.data.DataLoader
    assert torch.nn.parallel.DistributedDataParallel is fl.nn.parallel.DistributedDataParallel
    assert torch.cuda.is_available() is False and torch.cuda.device_count() == 0
    assert torch.accelerator.is_available() is False
    assert torch.accelerator.current_accelerator() is None
    assert torch.backends.cudnn.is_available() is False and torch.backends.cudnn.version() is None
    assert torch.backends.mps.is_available() is False
    t = torch.zeros(2)
    assert t.is_cpu and not t.is_cuda and not t.is_mps and t.device.type == "cpu"
    assert t.get_device() == -1
    with pytest.raises(RuntimeError, match="no CUDA device"):
        torch.cuda.current_device()
    torch.cuda.manual_seed_all(0)        # no GPU: a no-op, as in PyTorch
    torch.cuda.empty_cache()
    with pytest.raises(RuntimeError, match="no accelerator"):
        torch.accelerator.synchronize()
