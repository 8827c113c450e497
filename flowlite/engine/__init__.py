"""The engine: lazy graphs and how they run.

Layer: engine — imports nothing of flowlite. Nothing above it. Immutable IR nodes and primitives
(`ir`), dtypes/devices/meshes, the runtime state (`runtime`), the graph key, the autograd tape's
entries (`tape`), the lowering of a node list to one jitted executable (`lowering`), length
buckets, and the executor (sync, cache, rollback). It knows nothing of PyTorch's API: the tensor
front end (`flowlite.frontend`) sits on top of it.
"""
