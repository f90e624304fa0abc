#!/usr/bin/python3
"""Turns text.txt (the opening of Charles Dickens's A Tale of Two Cities,
1859, in the public domain) into the character-level training data of
gpt.mesh: vocab.txt (one character per line, in id order), tokens.npy and
targets.npy (64 windows of 16 characters from seeded random offsets;
targets are the next characters). Run with /usr/bin/python3 (numpy)."""
import os
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
text = open(os.path.join(HERE, "text.txt")).read().replace("\n", " ")
chars = sorted(set(text))
ids = np.array([chars.index(c) for c in text], dtype=np.int64)
rng = np.random.default_rng(42)
T, N = 16, 64
starts = rng.integers(0, len(ids) - T - 1, N)
np.save(os.path.join(HERE, "tokens.npy"), np.stack([ids[s:s + T] for s in starts]))
np.save(os.path.join(HERE, "targets.npy"), np.stack([ids[s + 1:s + T + 1] for s in starts]))
with open(os.path.join(HERE, "vocab.txt"), "w") as f:
    f.write("\n".join(repr(c) for c in chars) + "\n")
print(len(chars), "characters,", len(ids), "tokens")
