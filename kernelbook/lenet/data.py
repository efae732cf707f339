"""Fashion-MNIST at 86x86, derived exactly the way the course derived it.

The course fed the network 86x86 images made by up-scaling the 28x28 originals with
scikit-image. The GPU kernels and the NumPy reference must see *bit-identical* inputs, so
the resize is reproduced step by step (``img / 256``, bilinear, ``* 256``, truncating cast)
and the derived arrays are cached under a name that contains the source file's hash, which
makes a stale cache impossible to pick up.

Files are in IDX format (the format Fashion-MNIST ships in): a big-endian header made of two
zero bytes, a type byte (``0x08`` = unsigned byte), the number of dimensions, then one
big-endian int32 per dimension, then the raw data in row-major order.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import math
import os
from pathlib import Path
from typing import IO, Literal

import numpy as np

from kernelbook import paths
from kernelbook.atomic import write_atomic as atomic_write
from kernelbook.errors import DataError, ShapeError

IMAGE_SIZE = 86
SOURCE_SIZE = 28
IDX_UBYTE = 0x08
IDX_IMAGES_MAGIC = 0x00000803
IDX_LABELS_MAGIC = 0x00000801

# Bump when the derivation below changes, so that old caches are ignored.
_RESIZE_VERSION = 1

#: Where the Debian package ``dataset-fashion-mnist`` installs the full data set.
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")

Split = Literal["train", "t10k"]

_FIX_MISSING = {
    "t10k": "restore data/fashion-mnist/ from the repository (git checkout -- data/fashion-mnist), "
    "apt-get install dataset-fashion-mnist, or pass images_path=/labels_path=.",
    "train": "apt-get install dataset-fashion-mnist (it installs "
    f"{DEBIAN_DIR}/train-*-idx*-ubyte.gz), or pass images_path=/labels_path= "
    "(--train-images/--train-labels for scripts/train_lenet.py).",
}


# --------------------------------------------------------------------------- IDX format


def _open_binary(path: Path, mode: str) -> IO[bytes]:
    """Open ``.gz`` transparently, so that callers never care which one they were given."""
    if path.suffix == ".gz":
        return gzip.open(path, mode)  # type: ignore[return-value]
    return open(path, mode)


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an unsigned-byte IDX file (plain or ``.gz``) into a uint8 array of its shape."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"IDX file {path} does not exist.",
            "apt-get install dataset-fashion-mnist, or pass the right path "
            "(images_path=/labels_path=).",
        )
    try:
        with _open_binary(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(
            f"Could not read IDX file {path}: {exc}.",
            "re-download or regenerate the file; a .gz file must be a complete gzip stream.",
        ) from exc
    return _parse_idx(raw, path)


def _parse_idx(raw: bytes, path: Path) -> np.ndarray:
    fix = "the file is not an unsigned-byte IDX file (or is damaged): re-download or regenerate it."
    if len(raw) < 4:
        raise DataError(f"IDX file {path} is {len(raw)} bytes long, too short for a header.", fix)
    zero0, zero1, type_byte, ndim = raw[0], raw[1], raw[2], raw[3]
    magic = int.from_bytes(raw[:4], "big")
    if zero0 != 0 or zero1 != 0:
        raise DataError(f"IDX file {path} has magic 0x{magic:08x}; IDX magic starts with two zero bytes.", fix)
    if type_byte != IDX_UBYTE:
        raise DataError(
            f"IDX file {path} has data type 0x{type_byte:02x}; only unsigned bytes (0x08) are supported.",
            fix,
        )
    if ndim == 0:
        raise DataError(f"IDX file {path} declares 0 dimensions (magic 0x{magic:08x}).", fix)
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise DataError(
            f"IDX file {path} declares {ndim} dimensions but ends inside its header "
            f"({len(raw)} bytes < {header_len}).",
            fix,
        )
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
    if any(d < 0 for d in shape):
        raise DataError(f"IDX file {path} declares a negative dimension: {shape}.", fix)
    expected = math.prod(shape)
    actual = len(raw) - header_len
    if actual != expected:
        raise DataError(
            f"IDX file {path} declares shape {shape} ({expected} bytes of data) but holds {actual} bytes "
            "after the header (truncated or has trailing bytes).",
            fix,
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(shape).copy()


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write a uint8 array as IDX (``.gz`` if the name says so), atomically.

    Atomic (temp file + ``os.replace``) so that an interrupted write never leaves a file that
    ``read_idx`` would later reject or, worse, misread.
    """
    path = Path(path)
    array = np.asarray(array)
    if array.dtype != np.uint8:
        raise ShapeError(
            f"write_idx got dtype {array.dtype}; IDX files here hold unsigned bytes.",
            "convert first, e.g. array.astype(np.uint8) after checking the range 0..255.",
        )
    if not 1 <= array.ndim <= 255:
        raise ShapeError(f"write_idx got a {array.ndim}-D array.", "pass an array with 1 to 255 dimensions.")
    if any(d > np.iinfo(np.int32).max for d in array.shape):
        raise ShapeError(f"write_idx got shape {array.shape}; IDX dimensions are int32.", "split the array.")
    header = bytes([0, 0, IDX_UBYTE, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    payload = header + np.ascontiguousarray(array).tobytes()
    if path.suffix == ".gz":
        # mtime=0 keeps the output byte-identical for identical input.
        payload = gzip.compress(payload, mtime=0)
    atomic_write(path, lambda f: f.write(payload))


# --------------------------------------------------------------------------- resize


def resize_to_86(images: np.ndarray) -> np.ndarray:
    """Up-scale uint8 (N, 28, 28) images to uint8 (N, 86, 86) exactly as the course did.

    Per image: ``skimage.transform.resize(img / 256, (86, 86), mode="constant", cval=0) * 256``
    then ``astype(np.uint8)`` (truncation, not rounding). Done one image at a time because
    that is what the course did; resizing the whole stack at once can differ in the last bit,
    which the truncating cast would turn into a different pixel value.
    """
    from skimage.transform import resize  # imported lazily: slow to import, only needed once

    images = np.asarray(images)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ShapeError(
            f"resize_to_86 expects uint8 (N, H, W) images, got {images.dtype} {images.shape}.",
            "pass the array returned by read_idx on an images file (uint8, 3-D).",
        )
    out = np.empty((images.shape[0], IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    for i, img in enumerate(images):
        out[i] = (resize(img / 256, (IMAGE_SIZE, IMAGE_SIZE), mode="constant", cval=0) * 256).astype(np.uint8)
    return out


# --------------------------------------------------------------------------- loading


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _default_file(split: Split, kind: Literal["images", "labels"]) -> Path:
    """The repository's copy first (t10k ships with it), then the Debian package's."""
    name = f"{split}-{kind}-idx{3 if kind == 'images' else 1}-ubyte.gz"
    folders = (paths.data_dir() / "fashion-mnist", DEBIAN_DIR)
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    looked = " and ".join(str(folder / name) for folder in folders)
    raise DataError(f"The Fashion-MNIST {split} {kind} file was not found (looked for {looked}).", _FIX_MISSING[split])


def cache_path_for(source: str | os.PathLike[str], split: Split) -> Path:
    """The cache file for the 86x86 derivation of ``source``, named after its content hash.

    The name holds the hash of the source file, the derivation version and the scikit-image
    version, so a changed source or resize can never be served from an old cache.
    """
    digest = _sha256(Path(source))[:16]
    skimage_version = _skimage_version()
    return paths.cache_dir() / (
        f"fashion-mnist-{split}-{IMAGE_SIZE}-v{_RESIZE_VERSION}-skimage{skimage_version}-{digest}.npy"
    )


def _skimage_version() -> str:
    """Part of the cache key: another scikit-image could interpolate differently in the last bit."""
    try:
        return importlib.metadata.version("scikit-image")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _load_cached(cache: Path) -> np.ndarray | None:
    """A cache that cannot be read or has the wrong shape is treated as absent, never trusted."""
    if not cache.is_file():
        return None
    try:
        array = np.load(cache, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
        return None
    return array


def _save_cache(cache: Path, array: np.ndarray) -> None:
    atomic_write(cache, lambda f: np.save(f, array, allow_pickle=False))


def read_images_86(images_path: str | os.PathLike[str], split: Split, use_cache: bool = True) -> np.ndarray:
    """uint8 (N, 86, 86) images from an IDX file holding 28x28 (resized, cached) or 86x86 (as is)."""
    images_path = Path(images_path)
    if not images_path.is_file():
        raise DataError(f"Images file {images_path} does not exist.", _FIX_MISSING[split])
    cache = cache_path_for(images_path, split) if use_cache else None
    if cache is not None:
        cached = _load_cached(cache)
        if cached is not None:
            return cached
    images = read_idx(images_path)
    if images.ndim != 3:
        raise ShapeError(
            f"{images_path} holds a {images.ndim}-D array {images.shape}; an images file is 3-D (N, H, W).",
            "pass an images file (…-images-idx3-ubyte[.gz]), not a labels file.",
        )
    size = images.shape[1:]
    if size == (IMAGE_SIZE, IMAGE_SIZE):
        return images  # already the course's 86x86 images: use them bit for bit
    if size != (SOURCE_SIZE, SOURCE_SIZE):
        raise ShapeError(
            f"{images_path} holds images of {size[0]}x{size[1]}; expected 28x28 (to resize) or 86x86.",
            "pass the Fashion-MNIST 28x28 images or the course's 86x86 images.",
        )
    resized = resize_to_86(images)
    if cache is not None:
        _save_cache(cache, resized)
    return resized


def load_split_uint8(
    split: Split,
    images_path: str | os.PathLike[str] | None = None,
    labels_path: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (N, 86, 86) images and int64 (N,) labels; compact (1 byte/pixel) for training."""
    images_file = Path(images_path) if images_path is not None else _default_file(split, "images")
    labels_file = Path(labels_path) if labels_path is not None else _default_file(split, "labels")
    images = read_images_86(images_file, split)
    if not labels_file.is_file():
        raise DataError(f"Labels file {labels_file} does not exist.", _FIX_MISSING[split])
    labels = read_idx(labels_file)
    if labels.ndim != 1:
        raise ShapeError(
            f"{labels_file} holds a {labels.ndim}-D array {labels.shape}; a labels file is 1-D.",
            "pass a labels file (…-labels-idx1-ubyte[.gz]), not an images file.",
        )
    if labels.shape[0] != images.shape[0]:
        raise ShapeError(
            f"{labels_file} has {labels.shape[0]} labels but the images file has {images.shape[0]} images.",
            "pass the labels file that belongs to the images file (same split, same count).",
        )
    if labels.size and labels.max() > 9:
        raise DataError(f"{labels_file} has label {int(labels.max())}; Fashion-MNIST labels are 0..9.",
                        "pass a Fashion-MNIST labels file.")
    return images, labels.astype(np.int64)


def _take_first(images: np.ndarray, labels: np.ndarray, n: int | None) -> tuple[np.ndarray, np.ndarray]:
    if n is None:
        return images, labels
    total = images.shape[0]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= total:
        raise ShapeError(f"n={n!r} images were requested but the set has {total}.",
                         f"pass an integer n with 1 <= n <= {total}, or n=None for all of them.")
    return images[:n], labels[:n]


def _as_network_input(images: np.ndarray) -> np.ndarray:
    """float32 (N, 1, 86, 86) in 0..255: the values the course's network consumes, unnormalised."""
    return images.astype(np.float32)[:, None, :, :]


def load_test_set(
    n: int | None = None,
    images_path: str | os.PathLike[str] | None = None,
    labels_path: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The 10k test images as float32 (N, 1, 86, 86) in 0..255 and labels int64 (N,).

    By default derived from the shipped 28x28 ``t10k`` files; ``images_path`` may point to a
    28x28 (resized) or an 86x86 (used as is) IDX file. ``n`` keeps the first n images.
    """
    images, labels = load_split_uint8("t10k", images_path, labels_path)
    images, labels = _take_first(images, labels, n)
    return _as_network_input(images), labels


def load_train_set(
    images_path: str | os.PathLike[str] | None = None,
    labels_path: str | os.PathLike[str] | None = None,
    *,
    n: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The 60k training images as float32 (N, 1, 86, 86) in 0..255 and labels int64 (N,).

    Needs about 1.8 GB as float32; training code should prefer ``load_split_uint8("train")``.
    """
    images, labels = load_split_uint8("train", images_path, labels_path)
    images, labels = _take_first(images, labels, n)
    return _as_network_input(images), labels
