"""ngrad.save / ngrad.load: round trips of tensors, state dicts and nested containers in the
documented zip format (no pickle), and torch.save's zip format read without PyTorch through a
restricted unpickler (files written by torch where it is installed, and pickles written here
opcode by opcode, so the reader is tested without torch too)."""

import collections
import io
import json
import math
import struct
import zipfile

import numpy as np
import pytest

import ngrad
from ngrad import nn
from ngrad.serialization import load, save


def _round_trip(obj):
    buf = io.BytesIO()
    save(obj, buf)
    buf.seek(0)
    return load(buf)


def test_module_state_dict_round_trips_through_a_file(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    net(ngrad.randn(8, 3))  # moves the running statistics
    path = tmp_path / "net.ngrad"
    save(net.state_dict(), path)
    sd = load(str(path))
    assert isinstance(sd, collections.OrderedDict) and list(sd) == list(net.state_dict())
    assert sd["1.num_batches_tracked"].dtype is ngrad.int64 and sd["1.num_batches_tracked"].item() == 1
    fresh = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(sd)
    x = ngrad.randn(5, 3)
    net.eval(), fresh.eval()
    np.testing.assert_array_equal(fresh(x).detach().numpy(), net(x).detach().numpy())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.ngrad"]  # no temporary file left


def test_nested_containers_dtypes_flags_and_shared_tensors():
    w = nn.Parameter(ngrad.tensor([1.5, -2.0], dtype=ngrad.float64))
    frozen = nn.Parameter(ngrad.zeros(2), requires_grad=False)
    leaf = ngrad.ones(3, requires_grad=True)
    obj = {
        "w": w,
        "again": w,
        "frozen": frozen,
        "leaf": leaf,
        "ints": ngrad.tensor([1, 2], dtype=ngrad.int32),
        "mask": ngrad.tensor([True, False]),
        3: (None, True, 2, math.inf, "text", [ngrad.tensor(7)]),
        "array": np.arange(4, dtype=np.int16),
        "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
        "nan": math.nan,
    }
    out = _round_trip(obj)
    assert list(out) == list(obj) and out["again"] is out["w"]
    assert type(out["w"]) is nn.Parameter and out["w"].requires_grad and out["w"].dtype is ngrad.float64
    assert type(out["frozen"]) is nn.Parameter and not out["frozen"].requires_grad
    assert type(out["leaf"]) is ngrad.Tensor and out["leaf"].requires_grad and out["leaf"].is_leaf
    assert out["ints"].dtype is ngrad.int32 and out["mask"].tolist() == [True, False]
    assert out[3][:5] == (None, True, 2, math.inf, "text") and out[3][5][0].item() == 7
    assert out["array"].dtype == np.int16 and out["array"].tolist() == [0, 1, 2, 3]
    assert type(out["ordered"]) is collections.OrderedDict and list(out["ordered"]) == ["b", "a"]
    assert math.isnan(out["nan"]) and out["w"].tolist() == [1.5, -2.0]


def test_the_format_is_the_documented_one_and_holds_no_pickle():
    buf = io.BytesIO()
    save({"x": ngrad.tensor([1.0, 2.0]), 1: [None]}, buf)
    z = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    assert sorted(z.namelist()) == ["ngrad/arrays/0.npy", "ngrad/tree.json", "ngrad/version"]
    tree = json.loads(z.read("ngrad/tree.json"))
    assert tree == {
        "dict": [
            [
                {"value": "x"},
                {"tensor": 0, "dtype": "float32", "requires_grad": False, "parameter": False, "device": "cpu"},
            ],
            [{"value": 1}, {"list": [{"value": None}]}],
        ],
        "ordered": False,
    }
    assert np.load(io.BytesIO(z.read("ngrad/arrays/0.npy")), allow_pickle=False).tolist() == [1.0, 2.0]
    # an array of Python objects (which would need pickle) is refused on load
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as out:
        for name in ("ngrad/version", "ngrad/tree.json"):
            out.writestr(name, z.read(name))
        arr = io.BytesIO()
        np.save(arr, np.array([object()], dtype=object), allow_pickle=True)
        out.writestr("ngrad/arrays/0.npy", arr.getvalue())
    evil.seek(0)
    with pytest.raises(ValueError, match="allow_pickle"):
        load(evil)


def test_save_refuses_what_it_cannot_describe():
    with pytest.raises(TypeError, match="ngrad.save cannot store an object of type builtin_function_or_method"):
        save({"f": print}, io.BytesIO())
    with pytest.raises(RuntimeError, match="not a file written by ngrad.save or torch.save"):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("other.txt", "hello")
        buf.seek(0)
        load(buf)


def test_optimizer_state_round_trips():
    w = ngrad.tensor([1.0, -1.0], requires_grad=True)
    opt = ngrad.optim.Adam([w], lr=0.1, betas=(0.8, 0.9))
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    sd = _round_trip(opt.state_dict())
    assert sd["param_groups"][0]["betas"] == (0.8, 0.9) and list(sd["state"]) == [0]
    other = ngrad.optim.Adam([ngrad.tensor([1.0, -1.0], requires_grad=True)], lr=0.5)
    other.load_state_dict(sd)
    assert other.param_groups[0]["lr"] == 0.1
    np.testing.assert_array_equal(other.state_dict()["state"][0]["exp_avg"].numpy(), opt.state[w]["exp_avg"].numpy())


# --- torch.save's format, written opcode by opcode (no torch needed) ---------------------------


def _text(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _tensor_pickle(storage_type, key, numel, offset, size, stride):
    """A protocol-2 pickle of ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
    False, None)``, the storage a persistent id, as torch.save writes it."""
    ints = lambda xs: b"(" + b"".join(b"J" + struct.pack("<i", x) for x in xs) + b"t"  # noqa: E731
    pid = b"(" + _text("storage") + b"ctorch\n" + storage_type + b"\n" + _text(key) + _text("cpu")
    pid += b"J" + struct.pack("<i", numel) + b"tQ"
    body = b"ctorch._utils\n_rebuild_tensor_v2\n(" + pid + b"J" + struct.pack("<i", offset)
    body += ints(size) + ints(stride) + b"\x89Nt" + b"R"
    return b"\x80\x02" + b"ccollections\nOrderedDict\n)R" + b"(" + _text("w") + body + b"u."


def _torch_zip(pickle_bytes, storages):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data)
    buf.seek(0)
    return buf


def test_reads_a_torch_zip_without_torch_and_checks_bounds():
    data = np.arange(6, dtype=np.float32).tobytes()
    sd = load(_torch_zip(_tensor_pickle(b"FloatStorage", "0", 6, 1, [2, 2], [1, 3]), {"0": data}))
    assert list(sd) == ["w"] and sd["w"].dtype is ngrad.float32
    assert sd["w"].tolist() == [[1.0, 4.0], [2.0, 5.0]]  # offset 1, a transposed (2, 2) window
    with pytest.raises(Exception, match="reads past the end of its storage"):
        load(_torch_zip(_tensor_pickle(b"FloatStorage", "0", 6, 1, [2, 2], [1, 5]), {"0": data}))
    with pytest.raises(Exception, match="shorter than its 60 elements"):
        load(_torch_zip(_tensor_pickle(b"FloatStorage", "0", 60, 0, [2], [1]), {"0": data}))
    evil = b"\x80\x02cos\nsystem\n" + _text("echo pwned") + b"\x85R."
    with pytest.raises(Exception, match=r"refusing to load the global os.system"):
        load(_torch_zip(evil, {}))


def test_reads_what_torch_save_writes():
    torch = pytest.importorskip("torch")
    t_net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)).double()
    t_net(torch.randn(6, 3, dtype=torch.float64))
    with torch.no_grad():
        t_net[0].weight.set_(t_net[0].weight.t().contiguous().t())  # a strided storage
    buf = io.BytesIO()
    torch.save(t_net.state_dict(), buf)
    buf.seek(0)
    sd = load(buf)
    assert list(sd) == list(t_net.state_dict()) and sd["1.num_batches_tracked"].dtype is ngrad.int64
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()
    net.load_state_dict(sd)
    net.eval(), t_net.eval()
    x = np.random.default_rng(0).standard_normal((5, 3))
    np.testing.assert_allclose(
        net(ngrad.tensor(x)).detach().numpy(), t_net(torch.tensor(x)).detach().numpy(), rtol=1e-12
    )
    base = torch.arange(12.0)
    buf = io.BytesIO()
    torch.save({"p": torch.nn.Parameter(base[:4]), "view": base.view(3, 4)[:, 1], "n": [1, (2.5, "s")]}, buf)
    buf.seek(0)
    out = load(buf, map_location="cpu")
    assert type(out["p"]) is nn.Parameter and out["p"].requires_grad and out["p"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert out["view"].tolist() == [1.0, 5.0, 9.0] and out["n"] == [1, (2.5, "s")]


def test_a_torch_checkpoint_with_code_is_refused():
    torch = pytest.importorskip("torch")

    class Payload:
        def __reduce__(self):
            return (print, ("this must not run",))

    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1), "x": Payload()}, buf)
    buf.seek(0)
    with pytest.raises(Exception, match="refusing to load the global __builtin__.print"):
        load(buf)
