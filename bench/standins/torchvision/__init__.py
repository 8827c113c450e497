"""A small stand-in for torchvision, for running pytorch/examples programs on machines without
torchvision or a network (bench/real_programs.py): synthetic datasets with torchvision's class
names and item formats, the few transforms those programs use, and save_image.  It imports
`torch` when used, so the same code serves PyTorch and flowlite (under `python -m
flowlite.run`).  Dataset sizes come from REAL_PROGRAMS_DATASET_SIZE (train) and
REAL_PROGRAMS_TEST_SIZE (test); the images are random, so losses mean nothing — only
speed, memory and compile counts are measured with them."""
from . import datasets, transforms, utils  # noqa: F401

__version__ = "0.0-standin"
