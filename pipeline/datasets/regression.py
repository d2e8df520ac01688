"""Real regression data that runs with nothing downloaded: scikit-learn's diabetes data (442
patients, 10 baseline measurements, a quantitative measure of disease progression one year
later), shipped inside scikit-learn and written out once as a CSV file.

    python -m pipeline.datasets.regression --out DIR
    python pipeline/run_local.py --data DIR --label progression    # --task auto: regression
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

DIABETES_FILE = "diabetes.csv"
DIABETES_LABEL = "progression"
DIABETES_ROWS = 442


def write_diabetes(root: str) -> str:
    """root/diabetes.csv in the original units (age in years, sex 1/2, BMI, blood pressure,
    six serum measurements; the label an integer from 25 to 346); skipped when written."""
    path = os.path.join(root, DIABETES_FILE)
    if os.path.isfile(path):
        return root
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    os.makedirs(root, exist_ok=True)
    partial = path + ".partial"
    with open(partial, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*data.feature_names, DIABETES_LABEL])
        for features, target in zip(data.data, data.target, strict=True):
            writer.writerow([f"{value:g}" for value in features] + [f"{target:g}"])
    os.replace(partial, path)  # a killed write leaves no half file behind
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.datasets.regression", description=__doc__
    )
    parser.add_argument("--out", required=True, help="directory to write diabetes.csv into")
    args = parser.parse_args(argv)
    sys.stdout.write(f"{os.path.join(write_diabetes(args.out), DIABETES_FILE)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
