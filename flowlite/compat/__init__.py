"""Stand-ins for PyTorch's device and helper namespaces, so `import flowlite as torch` runs.

Layer: compat — imports nothing of flowlite. `torch.cuda`, `torch.accelerator`,
`torch.backends`, `torch.amp`, `torch.onnx` and `torch.utils.data`, answered from JAX's devices
and flowlite's own modules; the package exposes each as `flowlite.<name>`.
"""
