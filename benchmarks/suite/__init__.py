"""TensorBow's benchmark suites: `python -m benchmarks.suite SUITE`.

Suites (run from a TensorBow checkout, which holds the reference models):
  replicas  images/s against L for each model and batch size, with
            algorithm "sma" and "none" (their ratio is the cost of SMA)
  batch     images/s against the batch size: TF and TensorBow at L = 1, 2
  tta       time and epochs to a test accuracy, LeNet on Fashion-MNIST
  overhead  per-task cost of the scheduler against Session.run's per call
  auto      images/s of replicas="auto" against fixed L and TF at the same
            rows per run

Each writes OUT/SUITE.json, OUT/SUITE.md (tables) and OUT/SUITE.png; the
numbers published are in benchmarks/RESULTS.md.
"""
