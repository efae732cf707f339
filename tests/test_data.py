"""IDX reading/writing, the course's 28->86 resize, the cache and the loaders."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from kernelbook import paths
from kernelbook.errors import DataError, ShapeError
from kernelbook.lenet import data

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "fashion-mnist"
T10K_IMAGES = SHIPPED / "t10k-images-idx3-ubyte.gz"
T10K_LABELS = SHIPPED / "t10k-labels-idx1-ubyte.gz"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own empty cache, so none depends on (or pollutes) data/cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELBOOK_CACHE_DIR", str(cache))
    return cache


def _idx_bytes(magic: int, dims: list[int], payload: bytes) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + payload


# --------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip_images_and_labels(tmp_path: Path, suffix: str) -> None:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(5, 3, 7), dtype=np.uint8)
    labels = rng.integers(0, 10, size=(5,), dtype=np.uint8)
    data.write_idx(tmp_path / f"img{suffix}", images)
    data.write_idx(tmp_path / f"lab{suffix}", labels)
    np.testing.assert_array_equal(data.read_idx(tmp_path / f"img{suffix}"), images)
    back = data.read_idx(tmp_path / f"lab{suffix}")
    assert back.dtype == np.uint8 and back.shape == (5,)
    np.testing.assert_array_equal(back, labels)
    # The byte layout is the published one: magic, big-endian dims, raw data.
    raw = (tmp_path / f"img{suffix}").read_bytes()
    if suffix == ".gz":
        raw = gzip.decompress(raw)
    assert raw == _idx_bytes(0x00000803, [5, 3, 7], images.tobytes())
    # No temp files are left behind by the atomic write.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"img{suffix}", f"lab{suffix}"])


def test_read_idx_matches_the_published_t10k_header() -> None:
    labels = data.read_idx(T10K_LABELS)
    assert labels.shape == (10000,) and labels.dtype == np.uint8
    assert np.bincount(labels).tolist() == [1000] * 10  # Fashion-MNIST test set is balanced
    raw = gzip.decompress(T10K_IMAGES.read_bytes())
    assert raw[:16] == _idx_bytes(0x00000803, [10000, 28, 28], b"")
    images = data.read_idx(T10K_IMAGES)
    assert images.shape == (10000, 28, 28)
    assert images[3].tobytes() == raw[16 + 3 * 784 : 16 + 4 * 784]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (_idx_bytes(0x00000903, [1, 2, 2], bytes(4)), "data type 0x09"),  # signed bytes
        (_idx_bytes(0x01000803, [1, 2, 2], bytes(4)), "two zero bytes"),
        (_idx_bytes(0x00000803, [1, 2, 2], bytes(3)), "truncated"),
        (_idx_bytes(0x00000803, [1, 2, 2], bytes(5)), "trailing"),
        (_idx_bytes(0x00000803, [1], b""), "header"),
        (b"\x00\x00", "too short"),
    ],
)
def test_malformed_idx_is_a_data_error(tmp_path: Path, raw: bytes, needle: str) -> None:
    path = tmp_path / "bad-idx3-ubyte"
    path.write_bytes(raw)
    with pytest.raises(DataError, match=needle) as info:
        data.read_idx(path)
    assert "Fix:" in str(info.value)


def test_missing_idx_names_the_path_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope-idx3-ubyte.gz"
    with pytest.raises(DataError) as info:
        data.read_idx(missing)
    message = str(info.value)
    assert str(missing) in message
    assert "Fix:" in message and "apt-get install dataset-fashion-mnist" in message
    assert isinstance(info.value, FileNotFoundError)  # callers may catch the builtin


def test_missing_images_path_in_loader(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="Fix:.*images_path="):
        data.load_test_set(images_path=tmp_path / "missing.gz")


# --------------------------------------------------------------------------- resize


def test_resize_matches_skimage_exactly_on_real_images() -> None:
    from skimage.transform import resize

    images = data.read_idx(T10K_IMAGES)[[0, 1, 17, 4242, 9999]]
    out = data.resize_to_86(images)
    assert out.dtype == np.uint8 and out.shape == (5, 86, 86)
    for img, got in zip(images, out):
        expected = (resize(img / 256, (86, 86), mode="constant", cval=0) * 256).astype(np.uint8)
        np.testing.assert_array_equal(got, expected)
    # Truncation, not rounding: a rounding cast would differ somewhere on real images.
    raw = resize(images[0] / 256, (86, 86), mode="constant", cval=0) * 256
    assert not np.array_equal(out[0], np.rint(raw).astype(np.uint8))


def test_resize_rejects_wrong_input() -> None:
    with pytest.raises(ShapeError, match="Fix:"):
        data.resize_to_86(np.zeros((28, 28), dtype=np.uint8))
    with pytest.raises(ShapeError, match="Fix:"):
        data.resize_to_86(np.zeros((1, 28, 28), dtype=np.float32))


# --------------------------------------------------------------------------- loaders and cache


def _small_set(tmp_path: Path, n: int = 6) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    images = data.read_idx(T10K_IMAGES)[:n]
    labels = data.read_idx(T10K_LABELS)[:n]
    images_path, labels_path = tmp_path / "small-images-idx3-ubyte.gz", tmp_path / "small-labels-idx1-ubyte"
    data.write_idx(images_path, images)
    data.write_idx(labels_path, labels)
    return images_path, labels_path, images, labels


def test_load_test_set_default_shapes_and_values() -> None:
    images, labels = data.load_test_set(n=3)
    assert images.shape == (3, 1, 86, 86) and images.dtype == np.float32
    assert labels.dtype == np.int64 and labels.tolist() == data.read_idx(T10K_LABELS)[:3].tolist()
    expected = data.resize_to_86(data.read_idx(T10K_IMAGES)[:3]).astype(np.float32)
    np.testing.assert_array_equal(images[:, 0], expected)
    assert 0 <= images.min() and images.max() <= 255 and images.max() > 200


def test_user_86x86_file_is_read_without_resizing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    course = rng.integers(0, 256, size=(4, 86, 86), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1], dtype=np.uint8)
    data.write_idx(tmp_path / "t10k-86-images-idx3-ubyte", course)
    data.write_idx(tmp_path / "t10k-86-labels-idx1-ubyte", labels)

    def no_resize(_: np.ndarray) -> np.ndarray:
        raise AssertionError("an 86x86 file must not be resized")

    monkeypatch.setattr(data, "resize_to_86", no_resize)
    images, got_labels = data.load_test_set(
        images_path=tmp_path / "t10k-86-images-idx3-ubyte", labels_path=tmp_path / "t10k-86-labels-idx1-ubyte"
    )
    np.testing.assert_array_equal(images[:, 0], course.astype(np.float32))
    assert got_labels.tolist() == [3, 1, 4, 1]


def test_cache_is_reused_and_never_stale(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images_path, labels_path, raw_images, _ = _small_set(tmp_path)
    first, _ = data.load_test_set(images_path=images_path, labels_path=labels_path)
    caches = list(isolated_cache.glob("*.npy"))
    assert len(caches) == 1
    assert not [p for p in isolated_cache.iterdir() if p.suffix != ".npy"]  # no temp files left

    calls: list[int] = []
    real_resize = data.resize_to_86

    def counting_resize(images: np.ndarray) -> np.ndarray:
        calls.append(len(images))
        return real_resize(images)

    monkeypatch.setattr(data, "resize_to_86", counting_resize)
    again, _ = data.load_test_set(images_path=images_path, labels_path=labels_path)
    assert calls == []  # served from the cache
    np.testing.assert_array_equal(first, again)

    # Change the source (same name, same size): the old cache must not be used.
    changed = raw_images.copy()
    changed[0] = 255 - changed[0]
    data.write_idx(images_path, changed)
    fresh, _ = data.load_test_set(images_path=images_path, labels_path=labels_path)
    assert calls == [len(raw_images)]
    np.testing.assert_array_equal(fresh[:, 0], real_resize(changed).astype(np.float32))
    assert not np.array_equal(fresh[0], first[0])


def test_corrupt_cache_is_rebuilt(tmp_path: Path) -> None:
    images_path, labels_path, raw_images, _ = _small_set(tmp_path)
    cache = data.cache_path_for(images_path, "t10k")
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"not an npy file")
    images, _ = data.load_test_set(images_path=images_path, labels_path=labels_path)
    np.testing.assert_array_equal(images[:, 0], data.resize_to_86(raw_images).astype(np.float32))
    assert np.load(cache).shape == (len(raw_images), 86, 86)


def test_cache_lives_in_the_configured_cache_dir(tmp_path: Path, isolated_cache: Path) -> None:
    images_path, _, _, _ = _small_set(tmp_path)
    assert data.cache_path_for(images_path, "t10k").parent == paths.cache_dir() == isolated_cache.resolve()


def test_label_count_mismatch(tmp_path: Path) -> None:
    images_path, _, _, labels = _small_set(tmp_path)
    short = tmp_path / "short-labels-idx1-ubyte"
    data.write_idx(short, labels[:-1])
    with pytest.raises(ShapeError, match=r"5 labels but the images file has 6 images.*Fix:"):
        data.load_test_set(images_path=images_path, labels_path=short)


def test_wrong_image_size_and_swapped_files(tmp_path: Path) -> None:
    odd = tmp_path / "odd-images-idx3-ubyte"
    data.write_idx(odd, np.zeros((2, 32, 32), dtype=np.uint8))
    labels = tmp_path / "l-idx1-ubyte"
    data.write_idx(labels, np.zeros(2, dtype=np.uint8))
    with pytest.raises(ShapeError, match=r"32x32.*Fix:"):
        data.load_test_set(images_path=odd, labels_path=labels)
    with pytest.raises(ShapeError, match=r"3-D.*Fix:"):
        data.load_test_set(images_path=labels, labels_path=labels)


@pytest.mark.parametrize("n", [0, -1, 7, 2.5, True])
def test_bad_n_is_a_shape_error(tmp_path: Path, n: object) -> None:
    images_path, labels_path, _, _ = _small_set(tmp_path)
    with pytest.raises(ShapeError, match=r"1 <= n <= 6") as info:
        data.load_test_set(n=n, images_path=images_path, labels_path=labels_path)  # type: ignore[arg-type]
    assert "Fix:" in str(info.value)


def test_n_takes_the_first_images(tmp_path: Path) -> None:
    images_path, labels_path, raw_images, raw_labels = _small_set(tmp_path)
    images, labels = data.load_test_set(n=2, images_path=images_path, labels_path=labels_path)
    assert images.shape == (2, 1, 86, 86)
    assert labels.tolist() == raw_labels[:2].tolist()
    np.testing.assert_array_equal(images[:, 0], data.resize_to_86(raw_images[:2]).astype(np.float32))


def test_load_train_set_from_given_paths(tmp_path: Path) -> None:
    images_path, labels_path, _, raw_labels = _small_set(tmp_path, n=3)
    images, labels = data.load_train_set(images_path, labels_path)
    assert images.shape == (3, 1, 86, 86) and labels.tolist() == raw_labels.tolist()
    assert list(paths.cache_dir().glob("fashion-mnist-train-86-*.npy"))


def test_missing_training_files_say_how_to_get_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELBOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "no-debian")
    with pytest.raises(DataError) as info:
        data.load_train_set()
    assert "apt-get install dataset-fashion-mnist" in str(info.value)
    assert "train-images-idx3-ubyte.gz" in str(info.value)
