"""TensorBow's benchmark scripts and suites (`benchmarks.suite`); their
results are in benchmarks/RESULTS.md.
"""
