"""flowlite.nn layers, one concern per file."""
from .activation import (CELU, ELU, GELU, GLU, SELU, Hardsigmoid, Hardswish, Hardtanh,
                         LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU, ReLU, ReLU6, Sigmoid,
                         SiLU, Softmax, Softmin, Softplus, Softsign, Tanh, Tanhshrink)
from .attention import MultiheadAttention
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d
from .embedding import Embedding
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .flatten import Flatten, Unflatten
from .linear import Bilinear, Identity, Linear, NonDynamicallyQuantizableLinear
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss,
                   MSELoss, NLLLoss, SmoothL1Loss)
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, RMSNorm
from .padding import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d,
                      ConstantPad3d, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d,
                      ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, ZeroPad1d,
                      ZeroPad2d, ZeroPad3d)
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d,
                      AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d,
                      MaxPool3d)
from .rnn_cell import GRUCell, LSTMCell, RNNCell, RNNCellBase
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)
from .upsampling import Upsample

__all__ = sorted(k for k, v in dict(globals()).items()
                 if isinstance(v, type) and not k.startswith("_"))
