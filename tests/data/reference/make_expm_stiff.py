"""Writes expm_stiff.txt: K = expm(A h) and G = integral_0^h expm(A u) du of random stiff rate
matrices of linear compartment models (flows from j to i >= 0, eliminations >= 0, rates
log-uniform in [1e-3, 1e6]), computed with mpmath at 80+ significant digits as the exponential of
the augmented matrix [[A, I], [0, 0]] h (Taylor series after scaling, then squaring, with the
working precision raised by the digits the squarings cost). tests/grid/transition_test.cpp
reads the file. Run by hand (needs mpmath): python3 make_expm_stiff.py > expm_stiff.txt

Each case is one line: N h, then A, K and G row by row (N*N values each), as shortest
round-trip doubles (A's values are exactly the doubles the test uses)."""
import math
import random

import mpmath as mp


def expm_aug(a, h):
    n = len(a)
    aug = mp.zeros(2 * n)
    for i in range(n):
        for j in range(n):
            aug[i, j] = mp.mpf(a[i][j]) * mp.mpf(h)
        aug[i, n + i] = mp.mpf(h)
    s = max(0, int(mp.ceil(mp.log(mp.mnorm(aug, 1), 2))) + 1)
    with mp.workdps(80 + int(s * 0.31) + 20):
        r = mp.expm(aug / mp.mpf(2) ** s, method="taylor")
        for _ in range(s):
            r = r * r
    return ([[r[i, j] for j in range(n)] for i in range(n)],
            [[r[i, n + j] for j in range(n)] for i in range(n)])


def main():
    mp.mp.dps = 80
    rng = random.Random(20261127)
    lo, hi = math.log(1e-3), math.log(1e6)
    for case in range(48):
        n = 2 + case % 5
        h = 0.5 if case % 2 == 0 else 24.0
        a = [[0.0] * n for _ in range(n)]
        for j in range(n):
            for i in range(n):
                if i != j and rng.random() < 0.6:
                    k = math.exp(rng.uniform(lo, hi))
                    a[i][j] += k
                    a[j][j] -= k
            if rng.random() < 0.6:
                a[j][j] -= math.exp(rng.uniform(lo, hi))
        k, g = expm_aug(a, h)
        values = [n, h] + [v for row in a for v in row]
        values += [float(v) for row in k for v in row] + [float(v) for row in g for v in row]
        print(" ".join(repr(v) for v in values))


if __name__ == "__main__":
    main()
