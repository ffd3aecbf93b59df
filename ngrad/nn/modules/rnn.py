"""Recurrent layers with PyTorch's constructors, parameters, shapes and errors: ``RNN``
(tanh or relu), ``LSTM`` (with ``proj_size``), ``GRU`` and the single-step ``RNNCell``,
``LSTMCell``, ``GRUCell``.

Contract: parameters are named, shaped, ordered and initialised as in ``torch.nn``
(``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``, ``weight_hr_l{k}``,
with ``_reverse`` for the second direction; every one drawn from U(-1/sqrt(hidden_size),
1/sqrt(hidden_size)) through ``ngrad.nn.init``), so a PyTorch ``state_dict`` loads as it is.
``forward`` returns PyTorch's ``(output, h_n)`` or ``(output, (h_n, c_n))`` with PyTorch's
shapes, for batched (3-D) and unbatched (2-D) input, and raises PyTorch's exceptions on
mismatched shapes. A sequence of T steps is written in ngrad's differentiable operations, one
step after the other: the recorded graph (and a program traced by ``ngrad.compile``) holds T
steps per layer and direction; the input projection of all steps is one matrix product.
"""

import math
import numbers
import warnings

from ... import factories
from ... import tensor as _t
from .. import functional as F
from .. import init
from ..parameter import Parameter
from ..utils.rnn import PackedSequence
from .module import Module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _project(h, w_t, b):
    """``h @ w_t (+ b)``: the weights come transposed once per sequence, not once per step."""
    out = h.matmul(w_t)
    return out if b is None else out + b


def _rnn_step(gi, h, w_hh_t, b_hh, relu):
    """One Elman step: ``act(gi + h @ W_hh.T + b_hh)``, ``gi`` the input projection (holding
    ``b_hh`` too when ``b_hh`` is None)."""
    pre = gi + _project(h, w_hh_t, b_hh)
    return pre.relu() if relu else pre.tanh()


def _lstm_step(gi, h, c, w_hh_t, b_hh, w_hr_t):
    """One LSTM step: gates in PyTorch's order (input, forget, cell, output), the new cell
    state, and the new hidden state (projected by ``W_hr`` when given)."""
    gates = gi + _project(h, w_hh_t, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr_t is not None:
        h = h.matmul(w_hr_t)
    return h, c


def _gru_step(gi, h, w_hh_t, b_hh):
    """One GRU step: reset and update gates, the candidate ``tanh(gi_n + r * (h @ W_hn.T +
    b_hn))`` (the reset gate multiplies the hidden projection with its bias, as PyTorch's), and
    ``(1 - z) * n + z * h``."""
    gh = _project(h, w_hh_t, b_hh)
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return n + z * (h - n)


def _step(mode, gi, h, c, w):
    """One step of ``mode`` from the input projection ``gi``; returns ``(h, c)`` (``c`` None
    except for an LSTM)."""
    if mode == "LSTM":
        return _lstm_step(gi, h, c, w["w_hh_t"], w["b_hh"], w["w_hr_t"])
    if mode == "GRU":
        return _gru_step(gi, h, w["w_hh_t"], w["b_hh"]), None
    return _rnn_step(gi, h, w["w_hh_t"], w["b_hh"], mode == "RNN_RELU"), None


def _direction(mode, gi, sizes, h, c, w, reverse):
    """Run one layer in one direction. ``gi`` holds the input projections of every step,
    time-major, ``sizes[t]`` rows for step t (all equal for a padded batch; decreasing for a
    packed one, whose shorter sequences stop early and keep their last state). Returns the
    output rows in ``gi``'s order and the last state of every sequence."""
    offsets = [0]
    for b in sizes:
        offsets.append(offsets[-1] + b)
    outputs = [None] * len(sizes)
    if reverse:
        h0, c0 = h, c
        h, c = h0[: sizes[-1]], None if c0 is None else c0[: sizes[-1]]
    done = []  # (h, c) of sequences that ended, last rows first
    for t in range(len(sizes) - 1, -1, -1) if reverse else range(len(sizes)):
        b = sizes[t]
        if b < h.shape[0]:  # forward over a packed batch: sequences b.. have ended
            done.append((h[b:], None if c is None else c[b:]))
            h, c = h[:b], None if c is None else c[:b]
        elif b > h.shape[0]:  # backward over a packed batch: sequences start at their end
            rows = h.shape[0]
            h = _t.cat([h, h0[rows:b]])
            c = None if c is None else _t.cat([c, c0[rows:b]])
        h, c = _step(mode, gi[offsets[t] : offsets[t + 1]], h, c, w)
        outputs[t] = h
    if done:
        h = _t.cat([h] + [d[0] for d in reversed(done)])
        c = None if c is None else _t.cat([c] + [d[1] for d in reversed(done)])
    return (outputs[0] if len(outputs) == 1 else _t.cat(outputs)), h, c


def _check_cell_shapes(input, hiddens, input_size, hidden_size):
    """PyTorch's checks of a cell's input and states: feature sizes and batch sizes."""
    if input.shape[1] != input_size:
        raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} expected {input_size}")
    for k, hx in enumerate(hiddens):
        if hx.shape[0] != input.shape[0]:
            raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{k} batch size {hx.shape[0]}")
        if hx.shape[1] != hidden_size:
            raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {hx.shape[1]}, expected {hidden_size}")


def _batch(module, input, batch_sizes):
    """The batch size: the first step's for packed input."""
    if batch_sizes is not None:
        return int(batch_sizes[0])
    return input.size(0) if module.batch_first else input.size(1)


class RNNBase(Module):
    """What ``RNN``, ``LSTM`` and ``GRU`` share: the parameters of every layer and direction,
    their initialisation, the input and state checks, and the loop over layers (``mode`` is
    ``'RNN_TANH'``, ``'RNN_RELU'``, ``'LSTM'`` or ``'GRU'``)."""

    def __init__(
        self,
        mode,
        input_size,
        hidden_size,
        num_layers=1,
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        proj_size=0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                stacklevel=3,
            )
        for name, value in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} should be of type bool, got: {type(value).__name__}")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(value, int):
                raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
            if value <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        self._flat_weights_names = []
        self._all_weights = []
        self._create_parameters(_GATES[mode] * hidden_size, device, dtype)
        self.reset_parameters()

    def _create_parameters(self, gate_size, device, dtype):
        """Register each layer's and direction's parameters in PyTorch's order and names."""
        directions = 2 if self.bidirectional else 1
        out_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        for layer in range(self.num_layers):
            for direction in range(directions):
                layer_input = self.input_size if layer == 0 else out_size * directions
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, out_size))]
                if self.bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if self.proj_size > 0:
                    shapes.append(("weight_hr", (self.proj_size, self.hidden_size)))
                suffix = "_reverse" if direction == 1 else ""
                names = []
                for stem, shape in shapes:
                    name = f"{stem}_l{layer}{suffix}"
                    setattr(self, name, Parameter(factories.empty(shape, device=device, dtype=dtype)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)

    def reset_parameters(self):
        """Draw every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self):
        """Kept for scripts written for PyTorch, where it packs the weights for cuDNN: ngrad
        reads each parameter where it is, so there is nothing to do."""

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self):
        """The parameters of each layer and direction, as lists in PyTorch's order."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def _layer_weights(self, index):
        """The parameters of layer-direction ``index`` as the steps use them: ``w_ih`` and
        ``b_in`` for the input projection of all steps, ``w_hh_t`` and ``w_hr_t`` transposed
        once, and ``b_hh`` for each step (None where absent). But for a GRU, whose reset gate
        multiplies the hidden projection with its bias, ``b_hh`` is added once to ``b_in``."""
        p = {"b_ih": None, "b_hh": None, "w_hr": None}
        for name in self._all_weights[index]:
            stem = name.split("_l")[0]
            key = {"weight_ih": "w_ih", "weight_hh": "w_hh", "bias_ih": "b_ih", "bias_hh": "b_hh"}.get(stem, "w_hr")
            p[key] = getattr(self, name)
        w = {"w_ih": p["w_ih"], "b_in": p["b_ih"], "b_hh": p["b_hh"], "w_hh_t": p["w_hh"].t()}
        w["w_hr_t"] = None if p["w_hr"] is None else p["w_hr"].t()
        if self.mode != "GRU" and p["b_ih"] is not None:
            w["b_in"], w["b_hh"] = p["b_ih"] + p["b_hh"], None
        return w

    def check_input(self, input, batch_sizes=None):
        """PyTorch's checks of the input: the weights' dtype, 3 dimensions (2 packed), and
        ``input_size`` features."""
        weight = self._flat_weights[0]
        if input.dtype != weight.dtype:
            raise ValueError(
                f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})"
            )
        expected = 2 if batch_sizes is not None else 3
        if input.dim() != expected:
            raise RuntimeError(f"input must have {expected} dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {input.size(-1)}"
            )

    def get_expected_hidden_size(self, input, batch_sizes=None):
        """``(num_layers * directions, batch, proj_size or hidden_size)``."""
        batch = _batch(self, input, batch_sizes)
        directions = 2 if self.bidirectional else 1
        size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (self.num_layers * directions, batch, size)

    def check_hidden_size(self, hx, expected_hidden_size, msg="Expected hidden size {}, got {}"):
        """A RuntimeError with ``msg`` unless ``hx`` has the expected shape."""
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes=None):
        """Check the input and the initial state before a forward pass."""
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def _zeros(self, input, size, batch_sizes=None):
        batch = _batch(self, input, batch_sizes)
        directions = 2 if self.bidirectional else 1
        return factories.zeros((self.num_layers * directions, batch, size), dtype=input.dtype, device=input.device)

    def _unbatched(self, input, name, tensor_word):
        """PyTorch's input dimension check; True when ``input`` is one unbatched sequence."""
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D{tensor_word} instead")
        return input.dim() == 2

    def _run(self, data, sizes, hx, cx):
        """The stack of layers over ``data`` (time-major rows, ``sizes[t]`` for step t): the
        last layer's output rows and the final states ``(h_n, c_n)`` (``c_n`` None but for an
        LSTM)."""
        directions = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        x = data
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                c0 = None if cx is None else cx[index]
                w = self._layer_weights(index)
                gi = F.linear(x, w["w_ih"], w["b_in"])  # every step's input projection in one product
                out, h, c = _direction(self.mode, gi, sizes, hx[index], c0, w, direction == 1)
                outputs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = outputs[0] if directions == 1 else _t.cat(outputs, 1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, _t.stack(h_n), None if cx is None else _t.stack(c_n)

    def _run_padded(self, input, hx, cx):
        """``_run`` over a batched input in the module's layout; the output in that layout."""
        x = input.transpose(0, 1) if self.batch_first else input
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        out, h_n, c_n = self._run(x.reshape(steps * batch, x.shape[2]), [batch] * steps, hx, cx)
        out = out.reshape(steps, batch, out.shape[1])
        return (out.transpose(0, 1) if self.batch_first else out), h_n, c_n

    def _run_packed(self, input, hx, cx):
        """``_run`` over a ``PackedSequence``: states given in the caller's batch order are put
        in the packed order and the final states back in the caller's."""
        data, batch_sizes, sorted_indices, unsorted_indices = input
        if sorted_indices is not None:
            hx = hx.index_select(1, sorted_indices)
            cx = None if cx is None else cx.index_select(1, sorted_indices)
        self.check_forward_args(data, hx if cx is None else (hx, cx), batch_sizes)
        out, h_n, c_n = self._run(data, [int(b) for b in batch_sizes.tolist()], hx, cx)
        if unsorted_indices is not None:
            h_n = h_n.index_select(1, unsorted_indices)
            c_n = None if c_n is None else c_n.index_select(1, unsorted_indices)
        return PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices), h_n, c_n

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)


class _SingleStateRNN(RNNBase):
    """``RNN`` and ``GRU``: one state tensor ``h``."""

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            if hx is None:
                hx = self._zeros(input.data, self.hidden_size, input.batch_sizes)
            output, h_n, _ = self._run_packed(input, hx, None)
            return output, h_n
        name = "RNN" if self.mode.startswith("RNN") else self.mode
        unbatched = self._unbatched(input, name, " tensor" if name == "RNN" else "")
        batch_dim = 0 if self.batch_first else 1
        if unbatched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                if hx.dim() != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D tensor")
                hx = hx.unsqueeze(1)
        elif hx is not None and hx.dim() != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {hx.dim()}-D tensor")
        if hx is None:
            hx = self._zeros(input, self.hidden_size)
        self.check_forward_args(input, hx)
        output, h_n, _ = self._run_padded(input, hx, None)
        if unbatched:
            return output.squeeze(batch_dim), h_n.squeeze(1)
        return output, h_n


class RNN(_SingleStateRNN):
    """A multi-layer Elman RNN: ``h_t = act(x_t @ W_ih.T + b_ih + h_{t-1} @ W_hh.T + b_hh)``,
    ``act`` tanh or relu.

    ``forward(input, h_0=None)`` takes (L, N, input_size) (``(N, L, ...)`` with
    ``batch_first``) or an unbatched (L, input_size) and returns ``(output, h_n)``: output
    (L, N, D * hidden_size), h_n (D * num_layers, N, hidden_size), D = 2 if bidirectional.

    ```python
    >>> import ngrad
    >>> rnn = ngrad.nn.RNN(3, 5, num_layers=2, batch_first=True)
    >>> out, h_n = rnn(ngrad.ones(4, 7, 3))
    >>> rnn, out.shape, h_n.shape
    (RNN(3, 5, num_layers=2, batch_first=True), ngrad.Size([4, 7, 5]), ngrad.Size([2, 4, 5]))

    ```
    """

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        nonlinearity="tanh",
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        device=None,
        dtype=None,
        **kwargs,
    ):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if kwargs:
            raise TypeError(f"RNN.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'")
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(
            mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype
        )
        self.nonlinearity = nonlinearity


class GRU(_SingleStateRNN):
    """A multi-layer gated recurrent unit: reset ``r``, update ``z``, candidate
    ``n = tanh(x W_in.T + b_in + r * (h W_hn.T + b_hn))`` and ``h' = (1 - z) * n + z * h``,
    gates stacked in ``weight_ih_l{k}`` as (r, z, n). Shapes as ``RNN``'s.

    ```python
    >>> import ngrad
    >>> gru = ngrad.nn.GRU(3, 4, bidirectional=True)
    >>> out, h_n = gru(ngrad.ones(6, 3))  # unbatched: (L, input_size)
    >>> gru.weight_ih_l0_reverse.shape, out.shape, h_n.shape
    (ngrad.Size([12, 3]), ngrad.Size([6, 8]), ngrad.Size([2, 4]))

    ```
    """

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        device=None,
        dtype=None,
        **kwargs,
    ):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if kwargs:
            raise TypeError(f"GRU.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'")
        super().__init__(
            "GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype
        )


class LSTM(RNNBase):
    """A multi-layer long short-term memory: gates (input, forget, cell, output) stacked in
    ``weight_ih_l{k}`` in that order, ``c' = f * c + i * g``, ``h' = o * tanh(c')``, and with
    ``proj_size > 0`` ``h'`` projected by ``weight_hr_l{k}`` (proj_size, hidden_size).

    ``forward(input, (h_0, c_0)=None)`` returns ``(output, (h_n, c_n))``: output
    (L, N, D * H_out), h_n (D * num_layers, N, H_out), c_n (D * num_layers, N, hidden_size),
    H_out = proj_size or hidden_size.

    ```python
    >>> import ngrad
    >>> lstm = ngrad.nn.LSTM(3, 6, proj_size=2)
    >>> out, (h_n, c_n) = lstm(ngrad.ones(5, 4, 3))
    >>> lstm, out.shape, h_n.shape, c_n.shape
    (LSTM(3, 6, proj_size=2), ngrad.Size([5, 4, 2]), ngrad.Size([1, 4, 2]), ngrad.Size([1, 4, 6]))

    ```
    """

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        proj_size=0,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "LSTM",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            proj_size,
            device,
            dtype,
        )

    def get_expected_cell_size(self, input, batch_sizes=None):
        """``(num_layers * directions, batch, hidden_size)``: the cell state's shape."""
        batch = _batch(self, input, batch_sizes)
        return (self.num_layers * (2 if self.bidirectional else 1), batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes=None):
        """Check the input and both initial states, ``hidden = (h_0, c_0)``."""
        self.check_input(input, batch_sizes)
        expected_h = self.get_expected_hidden_size(input, batch_sizes)
        self.check_hidden_size(hidden[0], expected_h, "Expected hidden[0] size {}, got {}")
        expected_c = self.get_expected_cell_size(input, batch_sizes)
        self.check_hidden_size(hidden[1], expected_c, "Expected hidden[1] size {}, got {}")

    def forward(self, input, hx=None):
        out_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        if isinstance(input, PackedSequence):
            if hx is None:
                batch_sizes = input.batch_sizes
                hx = (
                    self._zeros(input.data, out_size, batch_sizes),
                    self._zeros(input.data, self.hidden_size, batch_sizes),
                )
            output, h_n, c_n = self._run_packed(input, hx[0], hx[1])
            return output, (h_n, c_n)
        unbatched = self._unbatched(input, "LSTM", "")
        batch_dim = 0 if self.batch_first else 1
        if unbatched:
            input = input.unsqueeze(batch_dim)
        if hx is None:
            hx = (self._zeros(input, out_size), self._zeros(input, self.hidden_size))
        else:
            want = 2 if unbatched else 3
            if hx[0].dim() != want or hx[1].dim() != want:
                kind = "unbatched 2-D" if unbatched else "batched 3-D"
                raise RuntimeError(
                    f"For {kind} input, hx and cx should also be {want}-D but got "
                    f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors"
                )
            if unbatched:
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        self.check_forward_args(input, hx)
        output, h_n, c_n = self._run_padded(input, hx[0], hx[1])
        if unbatched:
            return output.squeeze(batch_dim), (h_n.squeeze(1), c_n.squeeze(1))
        return output, (h_n, c_n)


class RNNCellBase(Module):
    """What the cells share: ``weight_ih`` (chunks * hidden, input), ``weight_hh``
    (chunks * hidden, hidden), ``bias_ih`` and ``bias_hh`` (or None), all drawn from
    U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        rows = num_chunks * hidden_size
        self.weight_ih = Parameter(factories.empty((rows, input_size), device=device, dtype=dtype))
        self.weight_hh = Parameter(factories.empty((rows, hidden_size), device=device, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(factories.empty(rows, device=device, dtype=dtype))
            self.bias_hh = Parameter(factories.empty(rows, device=device, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Draw every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def _prepare(self, input, states, names):
        """Check dimensions, add the batch dimension to unbatched input and states (zeros
        where no state is given); returns ``(input, states, unbatched)``."""
        kind = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{kind}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if states is not None:
            for name, state in zip(names, states):
                if state.dim() not in (1, 2):
                    raise ValueError(f"{kind}: Expected {name} to be 1D or 2D, got {state.dim()}D instead")
        unbatched = input.dim() == 1
        if unbatched:
            input = input.unsqueeze(0)
        if states is None:
            zeros = factories.zeros((input.size(0), self.hidden_size), dtype=input.dtype, device=input.device)
            states = [zeros] * len(names)
        elif unbatched:
            states = [state.unsqueeze(0) for state in states]
        _check_cell_shapes(input, states, self.input_size, self.hidden_size)
        return input, states, unbatched


class RNNCell(RNNCellBase):
    """One Elman step: ``h' = act(x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh)``,
    ``act`` tanh or relu; input (N, input_size) or (input_size,), ``h`` zeros if not given.

    ```python
    >>> import ngrad
    >>> cell = ngrad.nn.RNNCell(3, 2, nonlinearity="relu")
    >>> cell, cell(ngrad.ones(4, 3)).shape
    (RNNCell(3, 2, nonlinearity=relu), ngrad.Size([4, 2]))

    ```
    """

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        input, (h,), unbatched = self._prepare(input, None if hx is None else (hx,), ("hidden",))
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        h = _rnn_step(gi, h, self.weight_hh.t(), self.bias_hh, self.nonlinearity == "relu")
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step: ``(h', c')`` from input and ``(h, c)`` (zeros if not given).

    ```python
    >>> import ngrad
    >>> cell = ngrad.nn.LSTMCell(3, 2)
    >>> h, c = cell(ngrad.ones(3))
    >>> cell.weight_ih.shape, h.shape, c.shape
    (ngrad.Size([8, 3]), ngrad.Size([2]), ngrad.Size([2]))

    ```
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        input, (h, c), unbatched = self._prepare(input, hx, ("hx[0]", "hx[1]"))
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        h, c = _lstm_step(gi, h, c, self.weight_hh.t(), self.bias_hh, None)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """One GRU step: ``h'`` from input and ``h`` (zeros if not given).

    ```python
    >>> import ngrad
    >>> cell = ngrad.nn.GRUCell(3, 2, bias=False)
    >>> cell, cell(ngrad.ones(5, 3), ngrad.zeros(5, 2)).shape
    (GRUCell(3, 2, bias=False), ngrad.Size([5, 2]))

    ```
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        input, (h,), unbatched = self._prepare(input, None if hx is None else (hx,), ("hidden",))
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        h = _gru_step(gi, h, self.weight_hh.t(), self.bias_hh)
        return h.squeeze(0) if unbatched else h
