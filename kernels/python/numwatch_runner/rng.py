"""The seeded generator (version GEN_VERSION).

A trial's generator is a function of (check, dtype, seed) alone: Python's
Mersenne Twister seeded with a 128-bit BLAKE2b hash of "check/dtype/seed".
Every draw is derived from random.Random.random(), the one method whose
sequence Python promises to keep across versions for a given seed, with exact
IEEE arithmetic only (no libm), so a case replays bit for bit on any machine
and any Python >= 3.8.
"""
import hashlib
import random

from .dtypes import round_list

#: Version of the case derivation (family choice, shapes and data as functions
#: of the seed). Results with different versions are not comparable seed by
#: seed: bump it whenever the SDK, or a check you maintain, draws anything
#: differently.
GEN_VERSION = 1

_SQRT3 = 1.7320508075688772


def stream_key(check, dtype, seed):
    """The integer the trial's Mersenne Twister is seeded with."""
    text = "%s/%s/%d" % (check, dtype, seed)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest(), "little")


class Rng:
    """Seeded draws for one trial.

    Attributes a check may read:
      seed:   the trial's seed
      index:  seed // number of families: the seed's position within its
              family, for sweeps (consecutive seeds of one family count 0, 1, 2...)
      family: the family name the trial runs
    """

    def __init__(self, check, dtype, seed, index=0, family=None):
        self._r = random.Random(stream_key(check, dtype, seed))
        self.seed = seed
        self.index = index
        self.family = family

    def uniform(self, lo=0.0, hi=1.0):
        """Uniform in [lo, hi)."""
        return lo + (hi - lo) * self._r.random()

    def randint(self, lo, hi):
        """Uniform integer in [lo, hi], both included (hi >= lo)."""
        span = hi - lo + 1
        if span <= 0:
            raise ValueError("randint(%d, %d): empty range" % (lo, hi))
        return lo + min(int(self._r.random() * span), span - 1)

    def choice(self, seq):
        """One element of a non-empty sequence."""
        return seq[self.randint(0, len(seq) - 1)]

    def bernoulli(self, p):
        """True with probability p."""
        return self._r.random() < p

    def normal(self, mean=0.0, std=1.0):
        """Approximately normal: the sum of 4 uniforms rescaled (|z| < 3.47)."""
        r = self._r.random
        s = r() + r() + r() + r()
        return mean + std * ((s - 2.0) * _SQRT3)

    def normals(self, n, mean=0.0, std=1.0, dtype=None):
        """n normal draws, rounded to dtype when one is given."""
        r = self._r.random
        v = [mean + std * ((r() + r() + r() + r() - 2.0) * _SQRT3) for _ in range(n)]
        return round_list(v, dtype) if dtype else v

    def uniforms(self, n, lo=0.0, hi=1.0, dtype=None):
        """n uniform draws in [lo, hi), rounded to dtype when one is given."""
        r = self._r.random
        v = [lo + (hi - lo) * r() for _ in range(n)]
        return round_list(v, dtype) if dtype else v
