"""Tensor-memory-accelerator (TMA) descriptors for Hopper kernels, from the driver.

``tensor_map`` asks the driver's ``cuTensorMapEncodeTiled`` (through ctypes: CuPy does not wrap
it) for the 128-byte descriptor of a tiled tensor in global memory; a kernel reads it from global
memory (or as a ``__grid_constant__`` parameter) and its ``cp.async.bulk.tensor`` copies move one
box at a time. The descriptor holds the tensor's address, sizes and strides: it stays valid
while they do, so a caller caches it per (address, shape, box) and pays the driver call once.
"""

from __future__ import annotations

import ctypes
import functools

from .errors import ShapeError

# CUtensorMapDataType, CUtensorMapSwizzle and CUtensorMapL2promotion values
DT_FLOAT16, DT_FLOAT32, DT_BFLOAT16 = 6, 7, 9
SWIZZLE_128B = 3
L2_PROMOTION = {0: 0, 64: 1, 128: 2, 256: 3}   # bytes -> the driver's code


@functools.lru_cache(maxsize=1)
def _encoder():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def tensor_map(address: int, dtype: int, dims: list[int], strides: list[int], box: list[int],
               l2_promotion: int = 256, fix: str = "split the call into smaller ones.") -> bytes:
    """The 128-byte TMA descriptor of a tiled tensor: ``dims`` fastest first, ``strides`` in bytes
    of dims 1.., ``box`` the tile one copy moves; 128-byte swizzle; out-of-bounds reads give zeros;
    each copy's L2 requests widened to ``l2_promotion`` bytes (0, 64, 128 or 256). ``fix`` is the
    advice of the error raised when the driver refuses the tensor."""
    raw = ctypes.create_string_buffer(256)
    aligned = (ctypes.addressof(raw) + 63) & ~63          # CUtensorMap is 64-byte aligned
    rank = len(dims)
    status = _encoder()(ctypes.c_void_p(aligned), dtype, rank, ctypes.c_void_p(address),
                        (ctypes.c_uint64 * rank)(*dims), (ctypes.c_uint64 * max(rank - 1, 1))(*strides),
                        (ctypes.c_uint32 * rank)(*box), (ctypes.c_uint32 * rank)(*([1] * rank)),
                        0, SWIZZLE_128B, L2_PROMOTION[l2_promotion], 0)
    if status != 0:
        raise ShapeError(f"cuTensorMapEncodeTiled refused dims {dims}, strides {strides}, box {box} (error {status}).",
                         fix)
    return ctypes.string_at(aligned, 128)
