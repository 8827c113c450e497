"""What a run is built from: the device (and data parallelism over several), the model from
models/, the optimizer and the learning-rate schedule, as the flags ask."""
from __future__ import annotations

from trainer.cli import LM_CONTEXT, CLIError


def select_device(args):
    import flowlite as fl

    if args.device is None:
        return fl.default_device()
    try:
        dev = fl.device(args.device)
    except (RuntimeError, ValueError) as e:
        raise CLIError(f"--device {args.device}: {e}") from None
    fl.set_default_device(dev)
    return dev


def setup_devices(args, model):
    """Data parallelism over local devices: parameters replicated, every batch split along
    its first dimension, the gradient all-reduce inside the step's one executable."""
    import jax
    import flowlite as fl

    platform = args.fl_device.jax_device.platform
    devs = [d for d in jax.local_devices() if d.platform == platform]
    n = len(devs) if args.devices is None else args.devices
    if n > len(devs):
        raise CLIError(f"--devices {n}: only {len(devs)} {platform} device(s) available "
                       "(on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    if n <= 1:
        return None
    if args.batch_size % n:
        raise CLIError(f"--batch-size {args.batch_size} must be divisible by --devices {n}")
    mesh = fl.distributed.Mesh(("data",), devices=devs[:n])
    fl.distributed.data_parallel(model, mesh)
    args.fl_device = mesh.device
    return mesh


def build_model(args, ds):
    import models

    if args.model == "mlp":
        return models.MLP(in_features=ds.channels * ds.size * ds.size,
                          num_classes=ds.num_classes)
    if args.model == "lenet":
        return models.LeNet(in_channels=ds.channels, num_classes=ds.num_classes,
                            image_size=ds.size)
    if args.model == "resnet":
        return models.ResNet(in_channels=ds.channels, num_classes=ds.num_classes)
    if args.model == "lstm":
        return models.CharLSTM(vocab_size=ds.vocab_size)
    return models.GPT(vocab_size=ds.vocab_size, context=LM_CONTEXT["gpt"])


def build_optimizer(args, params):
    from flowlite import optim

    if args.optimizer == "sgd":
        return optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)
    if args.optimizer == "adam":
        return optim.Adam(params, lr=args.lr, weight_decay=args.weight_decay)
    if args.optimizer == "adamw":
        return optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    return optim.RMSprop(params, lr=args.lr, weight_decay=args.weight_decay)


def build_scheduler(args, opt, total_steps):
    from flowlite.optim import lr_scheduler as S

    if args.schedule == "cosine":
        return S.CosineAnnealingLR(opt, T_max=total_steps)
    if args.schedule == "step":   # ÷10 after each third of the run
        return S.StepLR(opt, step_size=max(1, total_steps // 3), gamma=0.1)
    if args.schedule == "onecycle":
        return S.OneCycleLR(opt, max_lr=args.lr, total_steps=total_steps)
    return None
