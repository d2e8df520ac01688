"""`python -m pipeline.mlmd ...`: the MLMD inspection CLI (pipeline/mlmd/cli.py)."""

import sys

from pipeline.mlmd.cli import main

sys.exit(main())
