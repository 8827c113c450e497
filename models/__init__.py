"""Tutorial models, one file each, written the way a PyTorch user would write them.

    mlp.MLP          multi-layer perceptron (the default `python train.py` model)
    lenet.LeNet      small CNN
    resnet.ResNet    CIFAR-style residual network with BatchNorm
    lstm.CharLSTM    character-level LSTM language model
    gpt.GPT          character-level decoder-only transformer with a KV-cache generate()
"""
from .mlp import MLP
from .lenet import LeNet
from .resnet import BasicBlock, ResNet, resnet8, resnet20
from .gpt import GPT, GPTConfig, generation_schedule, sample_next_token
from .lstm import CharLSTM

__all__ = ["MLP", "LeNet", "BasicBlock", "ResNet", "resnet8", "resnet20", "GPT", "GPTConfig",
           "generation_schedule", "sample_next_token", "CharLSTM"]
