#!/usr/bin/python3
"""Flips bytes inside one tensor's stored data in an HDF5 checkpoint, as silent disk or transfer
corruption would: damage_checkpoint.py FILE [TENSOR] [COUNT]. TENSOR is a dataset path such as
model/decoder.final_layernorm.weight (default: the largest dataset); COUNT bytes (default 300,
fewer if the data is smaller) are inverted from the 16th byte of its first chunk, which holds
tensor values (an edge chunk is padded with zeros after them). Prints the path."""
import sys

import h5py


def largest_dataset(f):
    found = []
    f.visititems(lambda name, obj: found.append((obj.size * obj.dtype.itemsize, name))
                 if isinstance(obj, h5py.Dataset) else None)
    return max(found)[1]


def data_extent(dataset):
    """Byte offset and size of the first stored piece of a dataset's data in the file."""
    if dataset.chunks is None:
        return dataset.id.get_offset(), dataset.size * dataset.dtype.itemsize
    info = dataset.id.get_chunk_info(0)
    return info.byte_offset, info.size


def main():
    path = sys.argv[1]
    with h5py.File(path, "r") as f:
        name = sys.argv[2] if len(sys.argv) > 2 else largest_dataset(f)
        offset, size = data_extent(f[name])
    with h5py.File(path, "r") as f:
        first_row = f[name].chunks[-1] * f[name].dtype.itemsize if f[name].chunks else size
    count = min(int(sys.argv[3]) if len(sys.argv) > 3 else 300, first_row - 16, size - 20)
    start = offset + 16
    with open(path, "r+b") as out:
        out.seek(start)
        data = bytearray(out.read(count))
        out.seek(start)
        out.write(bytes(b ^ 0xFF for b in data))
    print(name)


if __name__ == "__main__":
    main()
