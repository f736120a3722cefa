"""The project's benchmarks, a package so that each runs as `python -m bench.NAME` from the repository root and
they share one helper module (bench/common.py: paths, machine facts, the results envelope). Importing a module
here measures nothing: each runs its `main()` only as `__main__`. What each measures: bench/README.md."""
