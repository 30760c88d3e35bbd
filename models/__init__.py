"""The reference models of TensorBow's experiments (`lenet`, `mlp`,
`logistic_regression`, `resnet32`), their training (`training`, which puts
together `config`, `loop`, `records` and `progress`), their command line
(`flags`, `script`), data loaders (`data`) and plots (`plot`).

Run a model as a script from the checkout, e.g.
`python -m models.lenet --data=synthetic --max_steps=50` (`--help` lists
every flag).
"""
