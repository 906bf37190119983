# A package, so `tests/lab/jupyterlab.py` (the harness) is imported as a submodule and never
# shadows the real `jupyterlab` package on sys.path.
