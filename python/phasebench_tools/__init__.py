"""phasebench_tools: the Python side of phasebench (python/phasebench_tools in the repository).

One loader (results.py) and the tools built on it: compare, roofline, report, cpu_targets, each
with main(argv=None) -> int behind a console script and a thin wrapper in scripts/. Nothing is
imported here, so cpu_targets and the loader run without the plotting dependencies.
"""
