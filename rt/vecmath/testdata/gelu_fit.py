#!/usr/bin/python3
"""Fits the polynomial P of rt/f32gelu.go: R(t) = e^(t^2)·erfc(t) ≈ tau·P(tau)
with tau = 1/(1 + p·t), t in [0, T], minimising the largest relative error.

R(t) falls like 1/(t·sqrt(pi)), so R/tau tends to p/sqrt(pi) as t grows and
P is smooth on tau in [1/(1+p·T), 1]. The fit: least squares at Chebyshev
nodes in tau, weighted by 1/R (relative error) and reweighted towards the
worst points (Lawson's iteration, which approaches the minimax fit). The
coefficients are then fixed to float32 one at a time from the lowest degree,
refitting the rest after each, so that the rounding of the printed constants
is absorbed by the higher ones. ½ (from Φ = ½·erfc) is folded in.

Run: /usr/bin/python3 rt/testdata/gelu_fit.py  (numpy only; prints Go).
"""
import math
import numpy as np

P_SCALE = 0.6   # p: larger p makes tau's rounding matter less at small t, smaller p the fit easier
T = 16 / math.sqrt(2)  # |x| <= 16 is all gelu needs in f32
DEG = 10
N = 4000


def R(t):
    return np.array([math.erfc(v) * math.exp(v * v) for v in t])


def lawson(tau, y, fixed):
    """Fits y ≈ Σ c_i tau^i with c_i = fixed[i] for i < len(fixed)."""
    k = len(fixed)
    V = np.vander(tau, DEG + 1, increasing=True)
    rest = y - V[:, :k] @ np.array(fixed, dtype=float) if k else y.copy()
    w = np.ones(len(tau))
    best = None
    for _ in range(80):
        c = np.linalg.lstsq(V[:, k:] * (w / y)[:, None], rest * w / y, rcond=None)[0]
        full = np.concatenate([fixed, c])
        err = (V @ full - y) / y
        m = np.abs(err).max()
        if best is None or m < best[0]:
            best = (m, full)
        w = w * np.sqrt(np.abs(err)) + 1e-30
        w /= w.max()
    return best


def main():
    tmin = 1 / (1 + P_SCALE * T)
    tau = (tmin + 1) / 2 + (1 - tmin) / 2 * np.cos(np.pi * (np.arange(N) + 0.5) / N)
    t = (1 - tau) / (P_SCALE * tau)
    y = 0.5 * R(t) / tau
    fixed = []
    for i in range(DEG + 1):
        err, c = lawson(tau, y, fixed)
        fixed.append(float(np.float32(c[i])))
    tt = np.linspace(0, T, 400001)
    ta = 1 / (1 + P_SCALE * tt)
    e = np.abs(np.polyval(np.array(fixed[::-1]), ta) * ta / (0.5 * R(tt)) - 1).max()
    print(f"// p = {P_SCALE}, degree {DEG}: max relative error {e:.2e} (float64 evaluation)")
    for i, c in enumerate(fixed):
        print(f"\tgeluP{i} = {np.float32(c).item()!r}")


main()
