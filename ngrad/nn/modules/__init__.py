"""The ``Module`` class and the layers, containers, activations and losses built on it."""

from .activation import ELU, GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv1d, Conv2d
from .layers import Bilinear, Dropout, Embedding, Flatten, Identity, Linear, Unflatten
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, LayerNorm
from .pooling import AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase

__all__ = [
    "Module",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "Identity",
    "Linear",
    "Bilinear",
    "Embedding",
    "Flatten",
    "Unflatten",
    "Dropout",
    "LayerNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "GELU",
    "SiLU",
    "ELU",
    "LeakyReLU",
    "Softplus",
    "Softmax",
    "LogSoftmax",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "RNNBase",
    "RNN",
    "LSTM",
    "GRU",
    "RNNCellBase",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "Conv1d",
    "Conv2d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
]
