"""The course's parameter file: layout, round trip and every way a file can be malformed."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from kernelbook.errors import DataError, ShapeError
from kernelbook.lenet import weights as wmod
from kernelbook.lenet.weights import LAYER_COUNTS, LeNetWeights, read_weights, write_weights


def random_weights(seed: int = 0) -> LeNetWeights:
    rng = np.random.default_rng(seed)
    return LeNetWeights(
        **{name: rng.standard_normal(shape).astype(np.float32) for name, shape in LeNetWeights.SHAPES.items()}
    )


def _file_bytes(counts: list[int], n_layers: int | None = None) -> bytes:
    """A parameter file written by hand from the format description, independent of write_weights."""
    out = struct.pack("<i", len(counts) if n_layers is None else n_layers)
    for index, count in enumerate(counts):
        out += struct.pack("<i", count) + struct.pack(f"<{count}f", *[float(index)] * count)
    return out


def test_round_trip(tmp_path: Path) -> None:
    original = random_weights(1)
    path = tmp_path / "w.bin"
    write_weights(path, original)
    back = read_weights(path)
    for name in LeNetWeights.SHAPES:
        np.testing.assert_array_equal(getattr(back, name), getattr(original, name), err_msg=name)
        assert getattr(back, name).dtype == np.float32
    assert path.stat().st_size == 4 + 4 * len(LAYER_COUNTS) + 4 * sum(LAYER_COUNTS)
    assert [p.name for p in tmp_path.iterdir()] == ["w.bin"]  # atomic write leaves no temp file


def test_byte_layout_matches_the_course_format(tmp_path: Path) -> None:
    w = random_weights(2)
    path = tmp_path / "w.bin"
    write_weights(path, w)
    raw = path.read_bytes()
    assert struct.unpack_from("<i", raw, 0) == (10,)
    assert struct.unpack_from("<i", raw, 4) == (200,)
    conv1 = np.frombuffer(raw, dtype="<f4", count=200, offset=8)
    # conv weight (m, c, p, q) at index ((m*C + c)*K + p)*K + q, then the biases
    assert conv1[((2 * 1 + 0) * 7 + 3) * 7 + 5] == w.conv1[2, 0, 3, 5]
    np.testing.assert_array_equal(conv1[196:], w.conv1_bias)
    # walk to fc1 (layer 6) and check the (input i -> output o) at o*n_in + i convention
    offset = 4
    for count in LAYER_COUNTS[:6]:
        offset += 4 + 4 * count
    assert struct.unpack_from("<i", raw, offset) == (41504,)
    fc1 = np.frombuffer(raw, dtype="<f4", count=41504, offset=offset + 4)
    o, i = 17, 1000
    assert fc1[o * 1296 + i] == w.fc1[o, i]
    np.testing.assert_array_equal(fc1[41472:], w.fc1_bias)


def test_reads_a_hand_written_file(tmp_path: Path) -> None:
    path = tmp_path / "hand.bin"
    path.write_bytes(_file_bytes(list(LAYER_COUNTS)))
    w = read_weights(path)
    assert np.all(w.conv1 == 0) and np.all(w.conv2 == 3) and np.all(w.fc1_bias == 6) and np.all(w.fc2 == 8)


def test_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        read_weights(tmp_path / "none.bin")
    message = str(info.value)
    assert "none.bin" in message and "Fix:" in message
    assert "scripts/train_lenet.py" in message and "weights-86.bin" in message


def test_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNELBOOK_DATA_DIR", str(tmp_path))
    assert wmod.default_weights_path() == tmp_path.resolve() / "models" / "lenet86.bin"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (_file_bytes(list(LAYER_COUNTS)[:9]), "declares 9 layers; LeNet-86 has 10"),
        (_file_bytes(list(LAYER_COUNTS), n_layers=11), "declares 11 layers"),
        (_file_bytes([200, 0, 0, 3152, 0, 0, 41504, 0, 331, 0]), r"layer 8 \(fc2\) holds 331 values; expected 330"),
        (_file_bytes([196, 0, 0, 3152, 0, 0, 41504, 0, 330, 0]), r"layer 0 \(conv1\) holds 196 values; expected 200"),
        (_file_bytes(list(LAYER_COUNTS))[:-1], "truncated"),
        (_file_bytes(list(LAYER_COUNTS))[:1000], "truncated"),
        (_file_bytes(list(LAYER_COUNTS))[:2], "truncated"),
        (_file_bytes(list(LAYER_COUNTS)) + b"\0\0\0\0", "4 trailing bytes"),
        (b"", "truncated"),
    ],
)
def test_malformed_files(tmp_path: Path, raw: bytes, needle: str) -> None:
    path = tmp_path / "bad.bin"
    path.write_bytes(raw)
    with pytest.raises(DataError, match=needle) as info:
        read_weights(path)
    assert "Fix:" in str(info.value)


def test_non_finite_values_are_rejected(tmp_path: Path) -> None:
    raw = bytearray(_file_bytes(list(LAYER_COUNTS)))
    struct.pack_into("<f", raw, 8 + 4 * 10, float("nan"))  # a conv1 weight
    path = tmp_path / "nan.bin"
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"conv1 holds 1 non-finite.*Fix:"):
        read_weights(path)


def test_validate_rejects_bad_shapes_and_dtypes(tmp_path: Path) -> None:
    w = random_weights()
    w.fc1 = w.fc1.T.copy()  # (1296, 32): the transposed layout is a classic mistake
    with pytest.raises(ShapeError, match=r"fc1 has shape \(1296, 32\); expected \(32, 1296\).*Fix:"):
        write_weights(tmp_path / "x.bin", w)
    assert not (tmp_path / "x.bin").exists()
    w = random_weights()
    w.conv2 = w.conv2.astype(np.float64)
    with pytest.raises(ShapeError, match="float32"):
        w.validate()
