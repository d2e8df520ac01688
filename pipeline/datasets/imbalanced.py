"""Two-class CSV data with a chosen class balance and signal, for the blessing tests and the
class-weight benchmark: `python -m pipeline.datasets.imbalanced --rows N --minority F --out DIR`.

Columns: `row` (a shuffled row number, 1..N: an identifier the pre-flight check leaves out),
`x0` and `x1` (numbers), `colour` (text, three values, no signal) and `label` ("common" or
"rare", a fraction `minority` of them rare). `separation`: how far the rare rows' x0 (and half as
far their x1) sit from the common rows', in standard deviations; 0: no feature carries any
signal. The same arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

LABEL = "label"
COMMON, RARE = "common", "rare"
FILE = "rows.csv"


def write_classes(
    out_dir: str, rows: int, minority: float, separation: float, seed: int = 0
) -> str:
    """Writes out_dir/rows.csv; returns its path."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rare = rng.random(rows) < minority
    x0 = rng.standard_normal(rows) + np.where(rare, separation, 0.0)
    x1 = rng.standard_normal(rows) + np.where(rare, separation / 2, 0.0)
    colour = rng.choice(["red", "green", "blue"], rows)
    row_numbers = rng.permutation(rows) + 1
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, FILE)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["row", "x0", "x1", "colour", LABEL])
        for i in range(rows):
            label = RARE if rare[i] else COMMON
            writer.writerow([row_numbers[i], f"{x0[i]:.4f}", f"{x1[i]:.4f}", colour[i], label])
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.datasets.imbalanced")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--minority", type=float, default=0.1, help="fraction of rare rows")
    parser.add_argument("--separation", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    print(write_classes(args.out, args.rows, args.minority, args.separation, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
