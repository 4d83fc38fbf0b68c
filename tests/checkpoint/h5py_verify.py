#!/usr/bin/python3
"""Reads every dataset of an HDF5 file with h5py, in another HDF5 library than megatron-app's:
the checksums megatron-app writes must verify there too, and damaged tensors must fail there too. Prints the datasets that fail to read;
exit code 0 when all read, 1 otherwise.   h5py_verify.py FILE"""
import sys

import h5py

failed, count = [], 0


def visit(name, obj):
    global count
    if isinstance(obj, h5py.Dataset):
        count += 1
        try:
            obj[()]
        except OSError as error:
            failed.append(f"{name}: {error}")


with h5py.File(sys.argv[1], "r") as f:
    f.visititems(visit)
for line in failed:
    print(line)
print(f"{count} datasets, {len(failed)} failed")
sys.exit(1 if failed else 0)
