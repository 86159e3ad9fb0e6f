"""Writes expm_sweep.txt: K = expm(A h) and G = integral_0^h expm(A u) du of the built-in
models' rate matrices with one rate constant swept over 1e-300 .. 1e300 (every 10^20) and the
others at typical values, computed with mpmath (80 significant digits plus what the squarings
cost). three_compartment (depot, central, peripheral: ka, k12, k21, ke) and four_compartment
(depot, central, peripheral1, peripheral2: ka, k12, k21, k13, k31, ke), h = 0.5. The diagonal
of A is -(sum of the column's outflows) rounded to double, as the engine forms it, and mpmath
takes A's doubles as exact. tests/grid/transition_test.cpp reads the file. Run by hand (needs
mpmath): python3 make_expm_sweep.py > expm_sweep.txt

Each line: N h, then A, K and G row by row (N*N values each), as shortest round-trip doubles."""
from make_expm_stiff import expm_aug
import mpmath as mp

TYPICAL3 = {"ka": 1.2, "k12": 0.4, "k21": 0.11, "ke": 0.25}
FLOWS3 = [("ka", 0, 1), ("k12", 1, 2), ("k21", 2, 1), ("ke", 1, None)]
TYPICAL4 = {"ka": 1.2, "k12": 0.4, "k21": 0.11, "k13": 0.2, "k31": 0.03, "ke": 0.25}
FLOWS4 = [("ka", 0, 1), ("k12", 1, 2), ("k21", 2, 1), ("k13", 1, 3), ("k31", 3, 1),
          ("ke", 1, None)]


def rate_matrix(n, flows, values):
    a = [[0.0] * n for _ in range(n)]
    out = [[] for _ in range(n)]
    for name, frm, to in flows:
        k = values[name]
        if to is not None:
            a[to][frm] += k
        out[frm].append(k)
    for j in range(n):
        s = 0.0
        for k in out[j]:
            s += k  # in the flows' order, as the engine sums them
        a[j][j] = -s
    return a


def main():
    mp.mp.dps = 80
    h = 0.5
    for n, typical, flows in ((3, TYPICAL3, FLOWS3), (4, TYPICAL4, FLOWS4)):
        for name in typical:
            for e in range(-300, 301, 20):
                values = dict(typical)
                values[name] = 10.0 ** e
                a = rate_matrix(n, flows, values)
                k, g = expm_aug(a, h)
                row = [n, h] + [v for r in a for v in r]
                row += [float(v) for r in k for v in r] + [float(v) for r in g for v in r]
                print(" ".join(repr(v) for v in row))


if __name__ == "__main__":
    main()
