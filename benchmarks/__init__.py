"""TensorBow's benchmark scripts and suites (`benchmarks.suite`); their
results are in benchmarks/RESULTS.md.

Not part of the `tensorbow` wheel: run them as modules from the checkout's
root, e.g. `python -m benchmarks.suite replicas --help`.
"""
