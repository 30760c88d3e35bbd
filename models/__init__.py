"""The reference models of TensorBow's experiments (`lenet`, `mlp`,
`logistic_regression`, `resnet32`), their training (`training`, which puts
together `config`, `loop`, `records` and `progress`), their command line
(`flags`, `script`), data loaders (`data`) and plots (`plot`).

Not part of the `tensorbow` wheel: run a model as a module from the
checkout's root, e.g. `python -m models.lenet --data=synthetic
--max_steps=50` (`--help` lists every flag).
"""
