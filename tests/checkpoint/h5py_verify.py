#!/usr/bin/python3
"""Reads every dataset of an HDF5 file with h5py, in another HDF5 library than megatron-app's, and
checks its checksums independently of megatron-app's code: tile digests (the attributes
`fletcher32_tile` and `fletcher32`, Note [Tile digests]) recomputed here with numpy, and
Fletcher32-filtered chunks (format_version 1, uint8 tensors) by HDF5's own filter. Prints the
datasets that fail; exit code 0 when all pass, 1 otherwise.   h5py_verify.py FILE"""
import itertools
import sys

import h5py
import numpy as np

MODULUS = 65535
failed, count = [], 0


def tile_digest(tile):
    """B << 16 | A over the tile's bytes (row-major, as stored: little-endian elements) read as
    16-bit big-endian words w_0..w_{n-1}: A = sum w_k, B = sum (n - k) w_k, both mod 65535."""
    words = np.ascontiguousarray(tile).reshape(-1).view(np.uint8).view(">u2").astype(np.int64)
    n = words.size
    a = int(words.sum() % MODULUS)
    b = int(((n - np.arange(n, dtype=np.int64)) * words % MODULUS).sum() % MODULUS)
    return (b << 16) | a


def check_tiles(name, data, shape, digests):
    along = [(d + t - 1) // t for d, t in zip(data.shape, shape)]
    if len(digests) != int(np.prod(along)):
        return f"{name}: {len(digests)} Fletcher32 tile digests for {int(np.prod(along))} tiles"
    for index, tile in enumerate(itertools.product(*[range(a) for a in along])):
        origin = [i * t for i, t in zip(tile, shape)]
        block = data[tuple(slice(o, o + t) for o, t in zip(origin, shape))]
        if tile_digest(block) != int(digests[index]):
            return f"{name}: tile at {origin} fails its Fletcher32 checksum"
    return None


def visit(name, obj):
    global count
    if not isinstance(obj, h5py.Dataset):
        return
    count += 1
    try:
        data = obj[()]
    except OSError as error:  # HDF5's Fletcher32 filter
        failed.append(f"{name}: {error}")
        return
    if "fletcher32" in obj.attrs:
        problem = check_tiles(name, np.atleast_1d(data), [int(t) for t in obj.attrs["fletcher32_tile"]],
                              obj.attrs["fletcher32"])
        if problem:
            failed.append(problem)


with h5py.File(sys.argv[1], "r") as f:
    f.visititems(visit)
for line in failed:
    print(line)
print(f"{count} datasets, {len(failed)} failed")
sys.exit(1 if failed else 0)
