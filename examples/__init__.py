"""Examples of TensorBow in TF1 scripts, run from the checkout's root as
modules (`python -m examples.demo`); not part of the `tensorbow` wheel."""
