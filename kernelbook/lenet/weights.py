"""The course framework's parameter file, read and written bit for bit.

Format (little-endian): int32 layer count, then per layer an int32 value count followed by that
many float32 values. The course's LeNet-86 has ten layers (conv, relu, pool, conv, relu, pool,
fc, relu, fc, softmax); only conv and fc layers carry values. A conv layer stores its M*C*K*K
weights in (m, c, p, q) row-major order then M biases; a fully connected layer stores the weight
of input i to output o at index o*n_in + i (that is, an (out, in) row-major matrix), then n_out
biases. Keeping the exact format means the book's kernels can run the course's own weights file.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import numpy as np

from kernelbook import paths
from kernelbook.atomic import write_atomic as atomic_write
from kernelbook.errors import DataError, ShapeError

#: Layer names of the course's network, in file order.
LAYER_NAMES: tuple[str, ...] = ("conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "fc1", "relu3", "fc2", "softmax")
#: Values per layer in the file; conv/fc counts include their biases.
LAYER_COUNTS: tuple[int, ...] = (200, 0, 0, 3152, 0, 0, 41504, 0, 330, 0)
#: The whole file's size in bytes, and its first eight bytes (the layer count, then conv1's count).
FILE_BYTES = 4 + 4 * len(LAYER_COUNTS) + 4 * sum(LAYER_COUNTS)
FILE_HEADER = np.array([len(LAYER_COUNTS), LAYER_COUNTS[0]], dtype="<i4").tobytes()

_FIX_MISSING = "run `python scripts/train_lenet.py` to create it, or pass the course's weights-86.bin."
_FIX_MALFORMED = (
    "pass a parameter file written for this network (4x1x7x7 conv, 16x4x7x7 conv, 1296->32 fc, 32->10 fc), "
    "e.g. regenerate it with `python scripts/train_lenet.py`."
)


def default_weights_path() -> Path:
    """The trained weights that ship with the repository."""
    return paths.data_dir() / "models" / "lenet86.bin"


@dataclass
class LeNetWeights:
    """All parameters of LeNet-86. The conv biases are stored but the network never applies them."""

    conv1: np.ndarray  # (4, 1, 7, 7)
    conv1_bias: np.ndarray  # (4,)
    conv2: np.ndarray  # (16, 4, 7, 7)
    conv2_bias: np.ndarray  # (16,)
    fc1: np.ndarray  # (32, 1296), row o = output, column i = input
    fc1_bias: np.ndarray  # (32,)
    fc2: np.ndarray  # (10, 32)
    fc2_bias: np.ndarray  # (10,)

    SHAPES: ClassVar[dict[str, tuple[int, ...]]] = {
        "conv1": (4, 1, 7, 7),
        "conv1_bias": (4,),
        "conv2": (16, 4, 7, 7),
        "conv2_bias": (16,),
        "fc1": (32, 1296),
        "fc1_bias": (32,),
        "fc2": (10, 32),
        "fc2_bias": (10,),
    }

    def validate(self) -> LeNetWeights:
        """Check shapes, dtypes and finiteness here, so that a bad array fails by name, not deep in a kernel."""
        for f in fields(self):
            value = getattr(self, f.name)
            expected = self.SHAPES[f.name]
            if not isinstance(value, np.ndarray):
                raise ShapeError(f"LeNetWeights.{f.name} is a {type(value).__name__}, not a NumPy array.",
                                 f"pass np.asarray(..., dtype=np.float32) of shape {expected}.")
            if value.shape != expected:
                raise ShapeError(f"LeNetWeights.{f.name} has shape {value.shape}; expected {expected}.",
                                 f"reshape or regenerate it to {expected}.")
            if value.dtype != np.float32:
                raise ShapeError(f"LeNetWeights.{f.name} has dtype {value.dtype}; expected float32.",
                                 "convert it with .astype(np.float32).")
            if not np.all(np.isfinite(value)):
                bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
                raise DataError(f"LeNetWeights.{f.name} holds {bad} non-finite value(s) (NaN or inf).",
                                "retrain (the training diverged) or use another weights file.")
        return self

    def layer_values(self) -> list[np.ndarray]:
        """The flat float32 values of each of the ten file layers, in file order."""
        empty = np.zeros(0, dtype=np.float32)
        conv1 = np.concatenate([self.conv1.ravel(), self.conv1_bias])
        conv2 = np.concatenate([self.conv2.ravel(), self.conv2_bias])
        fc1 = np.concatenate([self.fc1.ravel(), self.fc1_bias])
        fc2 = np.concatenate([self.fc2.ravel(), self.fc2_bias])
        return [conv1, empty, empty, conv2, empty, empty, fc1, empty, fc2, empty]


def read_weights(path: str | os.PathLike[str] | None = None) -> LeNetWeights:
    """Read a course-format parameter file (default: the shipped ``data/models/lenet86.bin``)."""
    path = Path(path) if path is not None else default_weights_path()
    if not path.is_file():
        raise DataError(f"Weights file {path} does not exist.", _FIX_MISSING)
    raw = path.read_bytes()
    values = _parse_layers(raw, path)
    conv1, conv2, fc1, fc2 = values[0], values[3], values[6], values[8]
    return LeNetWeights(
        conv1=conv1[:196].reshape(4, 1, 7, 7),
        conv1_bias=conv1[196:],
        conv2=conv2[:3136].reshape(16, 4, 7, 7),
        conv2_bias=conv2[3136:],
        fc1=fc1[:41472].reshape(32, 1296),
        fc1_bias=fc1[41472:],
        fc2=fc2[:320].reshape(10, 32),
        fc2_bias=fc2[320:],
    ).validate()


def _parse_layers(raw: bytes, path: Path) -> list[np.ndarray]:
    def need(offset: int, nbytes: int, what: str) -> None:
        if offset + nbytes > len(raw):
            raise DataError(
                f"Weights file {path} is truncated: it ends at byte {len(raw)} while reading {what} "
                f"(needs bytes {offset}..{offset + nbytes - 1}).",
                _FIX_MALFORMED,
            )

    need(0, 4, "the layer count")
    n_layers = int(np.frombuffer(raw, dtype="<i4", count=1)[0])
    if n_layers != len(LAYER_COUNTS):
        raise DataError(f"Weights file {path} declares {n_layers} layers; LeNet-86 has {len(LAYER_COUNTS)}.",
                        _FIX_MALFORMED)
    offset = 4
    values: list[np.ndarray] = []
    for index, (name, expected) in enumerate(zip(LAYER_NAMES, LAYER_COUNTS)):
        need(offset, 4, f"the value count of layer {index} ({name})")
        count = int(np.frombuffer(raw, dtype="<i4", count=1, offset=offset)[0])
        offset += 4
        if count != expected:
            raise DataError(
                f"Weights file {path}: layer {index} ({name}) holds {count} values; expected {expected}.",
                _FIX_MALFORMED,
            )
        need(offset, 4 * count, f"the {count} values of layer {index} ({name})")
        values.append(np.frombuffer(raw, dtype="<f4", count=count, offset=offset).astype(np.float32))
        offset += 4 * count
    if offset != len(raw):
        raise DataError(
            f"Weights file {path} has {len(raw) - offset} trailing bytes after the last layer "
            f"(expected exactly {offset} bytes).",
            _FIX_MALFORMED,
        )
    return values


def write_weights(path: str | os.PathLike[str], weights: LeNetWeights) -> None:
    """Write ``weights`` in the course format, atomically (a reader never sees half a file)."""
    weights.validate()
    buffer = io.BytesIO()
    layers = weights.layer_values()
    buffer.write(np.int32(len(layers)).astype("<i4").tobytes())
    for values in layers:
        buffer.write(np.int32(values.size).astype("<i4").tobytes())
        buffer.write(values.astype("<f4").tobytes())
    payload = buffer.getvalue()
    atomic_write(Path(path), lambda f: f.write(payload))
