#!/usr/bin/python3
"""Prints which BLAS PyTorch's CPU matmul calls here: Debian's python3-torch
is built with BLAS_INFO=generic and calls libblas.so.3, whichever library
the alternatives system points that at (OpenBLAS once libopenblas0 is
installed; the reference BLAS otherwise)."""
import ctypes
import os

import torch

path = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
lib = ctypes.CDLL("libblas.so.3")
what = path
if hasattr(lib, "openblas_get_corename"):
    lib.openblas_get_corename.restype = ctypes.c_char_p
    what = f"OpenBLAS ({path}; {lib.openblas_get_corename().decode()} kernels)"
print(f"PyTorch {torch.__version__} BLAS: {what}")
