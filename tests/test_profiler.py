"""flowlite.profiler (torch.profiler): a Chrome trace of a training loop's phases."""
import json
import os

import flowlite as fl
from flowlite import nn, optim


def _train(steps, prof=None):
    fl.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = fl.randn(8, 4), fl.randn(8, 2)
    for _ in range(steps):
        with fl.profiler.record_function("my_step"):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        (loss * 2).item()           # a host read of new work: a sync of its own
        if prof is not None:
            prof.step()


def test_trace_holds_phases_causes_steps_and_user_ranges(tmp_path):
    fl.clear_cache()
    with fl.profiler.profile(activities=[fl.profiler.ProfilerActivity.CPU]) as prof:
        _train(3, prof)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    names = [e["name"] for e in events]
    for e in events:
        assert e["ph"] == "X" and e["dur"] >= 0 and isinstance(e["ts"], float)
    assert names.count("my_step") == 3
    assert {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"} <= set(names)
    # a cache miss is a compile, or a load when JAX's persistent cache had the program
    assert {"compile", "load"} & set(names) and "dispatch" in names and "record ops" in names
    causes = [e["args"]["cause"] for e in events if e["name"] == "sync"]
    assert any("optimizer.step()" in c for c in causes), causes
    assert any(".item()" in c and "test_profiler.py" in c for c in causes), causes
    compiles = [e for e in events if e["name"] in ("compile", "load")]
    assert all(e["args"]["nodes"] > 0 for e in compiles)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    assert "my_step" in table or "compile" in table


def test_nothing_is_recorded_outside_the_profiler():
    _train(1)
    with fl.profiler.profile() as prof:
        pass
    assert prof.events == [] and fl.engine.metrics.listeners == []


def test_schedule_and_tensorboard_handler_save_only_the_active_steps(tmp_path):
    saved = []
    sched = fl.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with fl.profiler.profile(schedule=sched, on_trace_ready=lambda p: saved.append(
            sorted({e["name"] for e in p.events if e["name"].startswith("ProfilerStep")}))) as p:
        _train(6, p)
    assert saved == [["ProfilerStep#2", "ProfilerStep#3"]]
    handler = fl.profiler.tensorboard_trace_handler(str(tmp_path / "log"), worker_name="w")
    with fl.profiler.profile(schedule=fl.profiler.schedule(wait=0, warmup=0, active=1,
                                                            repeat=1),
                             on_trace_ready=handler) as p:
        _train(2, p)
    files = os.listdir(tmp_path / "log")
    assert len(files) == 1 and files[0].startswith("w.") and files[0].endswith(".pt.trace.json")
    json.loads((tmp_path / "log" / files[0]).read_text())


def test_xla_device_trace_through_jax_profiler(tmp_path):
    with fl.profiler.profile(xla_trace_dir=str(tmp_path / "xla")) as prof:
        _train(1, prof)
    written = [f for _, _, fs in os.walk(tmp_path / "xla") for f in fs]
    assert written, "jax.profiler wrote no trace"
