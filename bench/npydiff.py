#!/usr/bin/env python3
"""npydiff.py REF_DIR GOT_DIR: compares every .npy file of REF_DIR with the
same file in GOT_DIR and prints, per file, max |got - ref| / max(|ref|, 1e-3)
(relative, with an absolute floor for values near zero). Exits 1 when a
file is missing, differs in shape or dtype, or exceeds TOL (default 1e-3).
Plain Python (the GPU machines of bench/gpu.sh may lack numpy): reads the
.npy format's little-endian f4, f8, i4 and i8 arrays itself."""
import array
import ast
import glob
import os
import sys

CODES = {"<f4": "f", "<f8": "d", "<i4": "i", "<i8": "q"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not an .npy file")
    if data[6] == 1:
        n, start = int.from_bytes(data[8:10], "little"), 10
    else:
        n, start = int.from_bytes(data[8:12], "little"), 12
    header = ast.literal_eval(data[start:start + n].decode("latin1"))
    if header["descr"] not in CODES or header["fortran_order"]:
        raise ValueError(f"{path}: dtype {header['descr']} not handled")
    a = array.array(CODES[header["descr"]])
    a.frombytes(data[start + n:])
    return header["descr"], tuple(header["shape"]), a


def main():
    ref, got = sys.argv[1], sys.argv[2]
    tol = float(os.environ.get("TOL", "1e-3"))
    files = sorted(glob.glob(os.path.join(ref, "*.npy")))
    if not files:
        print(f"  no .npy files in {ref}")
        return 1
    worst, bad = 0.0, False
    for f in files:
        name = os.path.basename(f)
        other = os.path.join(got, name)
        if not os.path.exists(other):
            print(f"  {name}: missing from {got}")
            bad = True
            continue
        (d1, s1, a), (d2, s2, b) = load(f), load(other)
        if (d1, s1) != (d2, s2):
            print(f"  {name}: {d1}{s1} vs {d2}{s2}")
            bad = True
            continue
        rel = max((abs(x - y) / max(abs(x), 1e-3) for x, y in zip(a, b)), default=0.0)
        worst = max(worst, rel)
        print(f"  {name} {d1}{list(s1)}: max rel diff {rel:.3g}")
    ok = not bad and worst <= tol
    print(f"  worst {worst:.3g} (tolerance {tol:g}): {'ok' if ok else 'TOO FAR'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
