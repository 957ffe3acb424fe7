"""matplotlib for the plot scripts (bench/plot*.py, bench/memory_*.py), drawing to files (Agg): or,
where it is not installed, one line naming what to install, and exit 2."""
import os, sys

INSTALL = "python3 -m pip install -r bench/requirements.txt"


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as e:
        missing = (e.name or "matplotlib").split(".")[0]
        print(f"bench/{os.path.basename(sys.argv[0])} needs {missing}: {INSTALL}", file=sys.stderr)
        sys.exit(2)
    return plt
