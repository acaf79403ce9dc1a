"""phasebench_tools: the Python side of phasebench (python/phasebench_tools in the repository).

One loader (results.py) and the tools built on it: compare, roofline, report, cpu_targets, ncu, serve, each
with main(argv=None) -> int behind a console script and a thin wrapper in scripts/, and each
through cli.py's one error path and safe output writer. Nothing is imported here, so cpu_targets
and the loader run without the plotting dependencies.
"""
