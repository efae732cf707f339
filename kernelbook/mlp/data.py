"""Deterministic weights and signals for the MLP study, and the weights file format.

Weights (``make_weights(seed)``): He initialisation, W_l ~ Normal(0, sqrt(2 / fan_in)), biases
~ Uniform(-0.1, 0.1), drawn with ``numpy.random.default_rng(seed)`` in the order W1, b1, W2,
b2, W3, b3 and stored as float32. The shipped file ``data/mlp/weights.bin`` is
``make_weights(WEIGHTS_SEED)``.

Signals (``make_signals(n, seed)``): x ~ Uniform(-1, 1), float32, shape (71, N), drawn with
``default_rng(seed)``; cheap enough to regenerate, so 2,097,152 x 71 floats are never stored.

File format (little-endian), the same frame for weights and signals:

    offset 0   8 bytes   magic: b"KBMLPW1\\0" (weights) or b"KBMLPX1\\0" (signals)
    offset 8   uint32    number of arrays A
    then A times: uint32 ndim, ndim x uint64 dimensions
    then the arrays' float32 data, row-major, one after the other, and nothing else.

Weights hold six arrays with the shapes of ``MlpShape.weight_shapes()``; signals hold one
array of shape (71, N).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from .. import paths
from ..errors import DataError
from .problem import LAYERS, MlpShape, check_columns

WEIGHTS_MAGIC = b"KBMLPW1\0"
SIGNALS_MAGIC = b"KBMLPX1\0"
WEIGHTS_SEED = 2024
SIGNALS_SEED = 7
SIGNAL_RANGE = (-1.0, 1.0)
NAMES = ("W1", "b1", "W2", "b2", "W3", "b3")


def weights_path() -> Path:
    return paths.data_dir() / "mlp" / "weights.bin"


def make_weights(seed: int = WEIGHTS_SEED) -> tuple[np.ndarray, ...]:
    """(W1, b1, W2, b2, W3, b3) as float32 NumPy arrays (He-initialised, see the module doc)."""
    rng = np.random.default_rng(seed)
    out = []
    for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
        out.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_out, fan_in)).astype(np.float32))
        out.append(rng.uniform(-0.1, 0.1, size=fan_out).astype(np.float32))
    return tuple(out)


def make_signals(n: int, seed: int = SIGNALS_SEED) -> np.ndarray:
    """x of shape (71, n), float32, Uniform(-1, 1), reproducible from ``seed``."""
    n = check_columns(n)
    rng = np.random.default_rng(seed)
    return rng.uniform(*SIGNAL_RANGE, size=(LAYERS[0], n)).astype(np.float32)


def check_weights(weights, where: str = "the weights") -> tuple[np.ndarray, ...]:
    """Six float32 arrays of the network's shapes, every value finite (NumPy or CuPy)."""
    from ..errors import ShapeError

    if not isinstance(weights, (tuple, list)) or len(weights) != 6:
        raise ShapeError(f"{where} must be a tuple (W1, b1, W2, b2, W3, b3) of six arrays.",
                         "pass kernelbook.mlp.data.load_weights() or make_weights(seed).")
    for name, arr, shape in zip(NAMES, weights, MlpShape.weight_shapes()):
        if tuple(getattr(arr, "shape", ())) != shape or str(getattr(arr, "dtype", "")) != "float32":
            raise ShapeError(f"{name} in {where} has shape {tuple(getattr(arr, 'shape', ()))} "
                             f"{getattr(arr, 'dtype', type(arr).__name__)}; expected {shape} float32.",
                             f"pass {name} as a float32 array of shape {shape} (W is outputs x inputs).")
    return tuple(weights)


def _write(path: Path, magic: bytes, arrays) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = [magic, struct.pack("<I", len(arrays))]
    for arr in arrays:
        header.append(struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape))
    with open(path, "wb") as fh:
        fh.write(b"".join(header))
        for arr in arrays:
            fh.write(np.ascontiguousarray(arr, dtype="<f4").tobytes())
    return path


def _read(path: Path, magic: bytes, what: str, fix: str) -> list[np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"The {what} file {path} does not exist.", fix)
    raw = path.read_bytes()

    def bad(reason: str) -> DataError:
        return DataError(f"The {what} file {path} is malformed: {reason}.", fix)

    if raw[:8] != magic:
        raise bad(f"it does not start with {magic!r}")
    pos = 8
    if len(raw) < pos + 4:
        raise bad("it ends inside the header")
    (count,) = struct.unpack_from("<I", raw, pos)
    pos += 4
    if not 1 <= count <= 16:
        raise bad(f"it claims {count} arrays")
    shapes = []
    for _ in range(count):
        if len(raw) < pos + 4:
            raise bad("it ends inside the header")
        (ndim,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if not 1 <= ndim <= 4 or len(raw) < pos + 8 * ndim:
            raise bad("an array header is truncated or has an impossible rank")
        shapes.append(struct.unpack_from(f"<{ndim}Q", raw, pos))
        pos += 8 * ndim
    need = pos + 4 * sum(int(np.prod(s)) for s in shapes)
    if len(raw) != need:
        raise bad(f"it holds {len(raw)} bytes, the header promises {need} (truncated or padded)")
    arrays = []
    for shape in shapes:
        size = int(np.prod(shape))
        arrays.append(np.frombuffer(raw, dtype="<f4", count=size, offset=pos).reshape(shape).astype(np.float32))
        pos += 4 * size
    return arrays


WEIGHTS_FIX = ("regenerate it with kernelbook.mlp.data.write_weights(kernelbook.mlp.data.make_weights(), path) "
               "or restore data/mlp/weights.bin from git.")


def write_weights(weights, path: Path | None = None) -> Path:
    arrays = [np.asarray(w) for w in check_weights(weights)]
    return _write(path or weights_path(), WEIGHTS_MAGIC, arrays)


def read_weights(path: Path | None = None) -> tuple[np.ndarray, ...]:
    """Read and check a weights file: six arrays of the network's shapes, all finite."""
    path = Path(path or weights_path())
    arrays = _read(path, WEIGHTS_MAGIC, "MLP weights", WEIGHTS_FIX)
    shapes = MlpShape.weight_shapes()
    if len(arrays) != 6 or any(a.shape != s for a, s in zip(arrays, shapes)):
        raise DataError(f"The MLP weights file {path} holds shapes {[a.shape for a in arrays]}; "
                        f"expected {list(shapes)}.", WEIGHTS_FIX)
    for name, arr in zip(NAMES, arrays):
        if not np.isfinite(arr).all():
            raise DataError(f"The MLP weights file {path} has non-finite values in {name}.", WEIGHTS_FIX)
    return tuple(arrays)


def load_weights() -> tuple[np.ndarray, ...]:
    """The shipped weights (``data/mlp/weights.bin``)."""
    return read_weights(weights_path())


def write_signals(x: np.ndarray, path: Path) -> Path:
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] != LAYERS[0] or x.dtype != np.float32:
        from ..errors import ShapeError

        raise ShapeError(f"signals have shape {x.shape} {x.dtype}; expected (71, N) float32.",
                         "pass x as a float32 array with one signal per column.")
    return _write(path, SIGNALS_MAGIC, [x])


def read_signals(path: Path) -> np.ndarray:
    fix = "write the file again with kernelbook.mlp.data.write_signals(x, path)."
    arrays = _read(Path(path), SIGNALS_MAGIC, "MLP signals", fix)
    if len(arrays) != 1 or arrays[0].ndim != 2 or arrays[0].shape[0] != LAYERS[0] or arrays[0].shape[1] < 1:
        raise DataError(f"The MLP signals file {path} holds shapes {[a.shape for a in arrays]}; "
                        "expected one array of shape (71, N).", fix)
    return arrays[0]
