"""The reference models of TensorBow's experiments, their training loop
(`training`), data loaders (`data`) and plots (`plot`).

Run a model as a script from the checkout, e.g.
`python -m models.lenet --data=synthetic --max_steps=50`.
"""
