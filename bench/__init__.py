"""Benchmarks: scripts, each run as `python bench/NAME.py` from the repository root.

How bench modules import each other: by their bare names (`import specs`, `import harness`),
because a script's own folder is first on `sys.path`; a test or a child process that imports
them puts bench/ on `sys.path` the same way. Nothing in bench/ imports itself as `bench.X` or
relatively, and no module guards an import with `except ImportError`: one spelling, so each
module is loaded once. The scripts that need flowlite or models/ put the repository root on
`sys.path` themselves. The modules are layered without cycles (tests/test_house.py checks it):

    specs        what every framework agrees on, NumPy only: configurations, initial
                 parameters, data, CartPole physics, and what a timed workload is
                 (Options, Workload, Unsupported)
    harness      interleaved timing, peak RSS, isolated child runs, tables
    jax_reference / torch_reference / flowlite_workloads, flowlite_cartpole
                 each framework's builders (PyTorch optional: workloads.torch_installed)
    workloads    the registry: framework name -> builder
    run, run_one, checks_ab, gpu_check, ...   the scripts

This file only lets tests import the self-contained modules (no bench imports of their own,
e.g. varlen_loops, torchstyle_gpt) as `bench.NAME` from the repository root.
"""
