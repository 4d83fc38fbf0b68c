#!/usr/bin/python3
"""Checks `megatron-app retro index` with Debian's python3-faiss, independently of the C++ side.

usage: check_index.py EMBED_DIR FLAT_INDEX IVF_INDEX NLIST

- Both index files open with Faiss's own reader and hold every chunk (ntotal = the embedding
  rows, which are read from the embed stage's block files in row order).
- The Flat index holds exactly the embeddings (reconstruct_n), and every chunk's nearest
  neighbour is itself: at distance 0, and any other id at distance 0 has the same embedding.
- The IVF index (IVF<NLIST>,Flat) with nprobe = NLIST is exhaustive, so its top-10 equals the
  Flat index's up to near-ties (their exact float64 distances, sorted, agree); its recall@1 and recall@10 against Flat at nprobe 1 and 4 are reported.
"""
import glob
import os
import sys

import faiss
import h5py
import numpy as np


def embeddings(embed_dir):
    def first_row(path):
        return int(os.path.basename(path).split("-")[0])
    blocks = sorted(glob.glob(os.path.join(embed_dir, "*.h5")), key=first_row)
    return np.concatenate([h5py.File(b, "r")["embeddings"][:] for b in blocks]).astype("float32")


def main(embed_dir, flat_file, ivf_file, nlist):
    x = embeddings(embed_dir)
    n = x.shape[0]
    flat, ivf = faiss.read_index(flat_file), faiss.read_index(ivf_file)
    ok = flat.ntotal == n and ivf.ntotal == n
    print(f"{n} chunks; Flat holds {flat.ntotal}, IVF holds {ivf.ntotal}")
    stored = flat.reconstruct_n(0, n)
    same = np.array_equal(stored, x)
    print(f"Flat index vectors equal the embeddings: {same}")
    ok &= same
    d, i = flat.search(x, 10)
    self_rows = i[:, 0] == np.arange(n)
    twins = (d[:, 0] == 0) & np.array([np.array_equal(x[i[r, 0]], x[r]) for r in range(n)])
    print(f"nearest neighbour is itself: {self_rows.sum()} of {n} "
          f"(the rest: an identical embedding at distance 0: {(twins & ~self_rows).sum()})")
    ok &= bool(np.all(self_rows | twins))
    faiss.ParameterSpace().set_index_parameter(ivf, "nprobe", nlist)
    _, j = ivf.search(x, 10)
    # The same neighbours up to near-ties: Flat and IVF compute distances in different ways (Flat
    # as |x|^2 + |y|^2 - 2 x.y through BLAS), so compare each list's exact float64 distances,
    # sorted, to the rounding of that form (1e-5 of the squared norms).
    x64 = x.astype("float64")
    def exact(ids):
        return np.sort(((x64[:, None, :] - x64[ids]) ** 2).sum(-1), axis=1)
    scale = 1e-5 * (1.0 + (x64 ** 2).sum(1, keepdims=True))
    exhaustive = bool(np.all(np.abs(exact(j) - exact(i)) <= scale))
    print(f"IVF{nlist},Flat at nprobe {nlist} gives Flat's top-10 (exact distances): {exhaustive} "
          f"(identical id lists: {np.mean(np.all(j == i, axis=1)):.3f} of queries)")
    ok &= exhaustive
    for nprobe in (1, 4):
        faiss.ParameterSpace().set_index_parameter(ivf, "nprobe", nprobe)
        _, j = ivf.search(x, 10)
        r1 = np.mean(j[:, 0] == i[:, 0])
        r10 = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i, j)])
        print(f"IVF{nlist},Flat nprobe {nprobe}: recall@1 {r1:.3f}, recall@10 {r10:.3f}")
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    faiss.omp_set_num_threads(1)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
