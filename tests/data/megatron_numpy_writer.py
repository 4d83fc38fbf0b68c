#!/usr/bin/env python3
"""Writes indexed datasets the way Megatron-LM's IndexedDatasetBuilder does (header with struct,
arrays and tokens with numpy tobytes), so the C++ tests can compare bytes with an independent
writer. Follows MEGATRON_NOTES.md section 1 (megatron/core/datasets/indexed_dataset.py).

Usage: megatron_numpy_writer.py SPEC.json, where SPEC is
  {"datasets": [{"prefix": P, "dtype": "uint16", "documents": [DOC, ...]}, ...],
   "merges": [{"prefix": P, "dtype": "uint16", "parts": [P1, P2, ...]}, ...]}
and DOC is {"sequences": [[id, ...], ...], "via": "add_document" | "add_item"}.
Then it reads every dataset back and prints one line per dataset: prefix, N, D.
"""
import json
import shutil
import struct
import sys

import numpy

_INDEX_HEADER = b"MMIDIDX\x00\x00"
_DTYPE_CODES = {numpy.uint8: 1, numpy.int8: 2, numpy.int16: 3, numpy.int32: 4, numpy.int64: 5,
                numpy.float64: 6, numpy.float32: 7, numpy.uint16: 8}


def read_index(idx_path):
    """Megatron's _IndexReader: the header with struct, the arrays with numpy.frombuffer."""
    with open(idx_path, "rb") as stream:
        assert stream.read(9) == _INDEX_HEADER, idx_path
        assert struct.unpack("<Q", stream.read(8)) == (1,)
        code = struct.unpack("<B", stream.read(1))[0]
        sequence_count = struct.unpack("<Q", stream.read(8))[0]
        document_count = struct.unpack("<Q", stream.read(8))[0]
        offset = stream.tell()
    buffer = memoryview(numpy.memmap(idx_path, mode="r", order="C"))
    lengths = numpy.frombuffer(buffer, dtype=numpy.int32, count=sequence_count, offset=offset)
    pointers = numpy.frombuffer(buffer, dtype=numpy.int64, count=sequence_count,
                                offset=offset + lengths.nbytes)
    documents = numpy.frombuffer(buffer, dtype=numpy.int64, count=document_count,
                                 offset=offset + lengths.nbytes + pointers.nbytes)
    dtype = {v: k for k, v in _DTYPE_CODES.items()}[code]
    return dtype, lengths, pointers, documents


class Builder:
    def __init__(self, bin_path, dtype):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_item(self, tokens):
        array = numpy.array(tokens, dtype=self.dtype)
        self.data_file.write(array.tobytes(order="C"))
        self.sequence_lengths.append(array.size)

    def add_document(self, tokens, lengths):
        array = numpy.array(tokens, dtype=self.dtype)
        self.data_file.write(array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def end_document(self):
        self.document_indices.append(len(self.sequence_lengths))

    def add_index(self, prefix):
        dtype, lengths, _, documents = read_index(prefix + ".idx")
        assert dtype == self.dtype
        offset = len(self.sequence_lengths)
        self.sequence_lengths.extend(lengths)
        self.document_indices.extend((offset + documents)[1:])
        with open(prefix + ".bin", "rb") as stream:
            shutil.copyfileobj(stream, self.data_file)

    def finalize(self, idx_path):
        self.data_file.close()
        itemsize = numpy.dtype(self.dtype).itemsize
        pointers, current = [], 0
        for length in self.sequence_lengths:
            pointers.append(current)
            current += length * itemsize
        with open(idx_path, "wb") as stream:
            stream.write(_INDEX_HEADER)
            stream.write(struct.pack("<Q", 1))
            stream.write(struct.pack("<B", _DTYPE_CODES[self.dtype]))
            stream.write(struct.pack("<Q", len(self.sequence_lengths)))
            stream.write(struct.pack("<Q", len(self.document_indices)))
            stream.write(numpy.array(self.sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
            stream.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
            stream.write(numpy.array(self.document_indices, dtype=numpy.int64).tobytes(order="C"))


def main():
    spec = json.load(open(sys.argv[1]))
    for dataset in spec.get("datasets", []):
        builder = Builder(dataset["prefix"] + ".bin", getattr(numpy, dataset["dtype"]))
        for document in dataset["documents"]:
            if document["via"] == "add_item":
                for sequence in document["sequences"]:
                    builder.add_item(sequence)
                builder.end_document()
            else:
                tokens = [t for sequence in document["sequences"] for t in sequence]
                builder.add_document(tokens, [len(s) for s in document["sequences"]])
        builder.finalize(dataset["prefix"] + ".idx")
    for merge in spec.get("merges", []):
        builder = Builder(merge["prefix"] + ".bin", getattr(numpy, merge["dtype"]))
        for part in merge["parts"]:
            builder.add_index(part)
        builder.finalize(merge["prefix"] + ".idx")
    for dataset in spec.get("datasets", []) + spec.get("merges", []):
        _, lengths, _, documents = read_index(dataset["prefix"] + ".idx")
        print(dataset["prefix"], len(lengths), len(documents))


if __name__ == "__main__":
    main()
