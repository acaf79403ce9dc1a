#!/usr/bin/env python3
"""scripts/pareto.py: the documented command for `phasebench-pareto`, a thin wrapper around
python/phasebench_tools/serve.py. The checkout's package is put first on the path, so this runs the
code next to it whether or not scripts/setup installed the package into .venv."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

from phasebench_tools.serve import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
