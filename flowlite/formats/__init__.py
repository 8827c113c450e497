"""File formats: `flowlite.save`/`load`, safetensors files and torch.save checkpoints.

Layer: formats — imports nothing of flowlite.
"""
