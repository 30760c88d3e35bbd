"""Examples of TensorBow in TF1 scripts."""
