#!/usr/bin/python3
"""Rounding references for meshrun's half-precision storage: f32 values
(random, tiny, huge, subnormal, exact ties, inf, nan) with NumPy's float16
bits and PyTorch's bfloat16 bits. Run with /usr/bin/python3."""
import os
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(5)
vals = [rng.standard_normal(200) * s for s in (1e-8, 1e-5, 1e-2, 1, 100, 1e4, 1e5)]
special = np.array([0.0, -0.0, 1.0, -2.5, 65504, 65520, 65519.99, 1e10, -1e10, 6e-8, 3e-8, 5.96e-8,
                    1.00048828125, 1.00146484375, 1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, np.nan, 2**-24, 2**-25, 1.5 * 2**-24])
x = np.concatenate(vals + [special]).astype(np.float32)
np.save(os.path.join(HERE, "f32.npy"), x)
np.save(os.path.join(HERE, "f16_bits.npy"), x.astype(np.float16).view(np.uint16).astype(np.int32))
bf = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().astype(np.int32) & 0xFFFF
np.save(os.path.join(HERE, "bf16_bits.npy"), bf)
print(len(x), "values")
