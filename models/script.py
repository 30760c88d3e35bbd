"""The `__main__` of the model scripts in `models/` (`python -m
models.lenet ...`): graph mode, the flags (models/flags.py), the data, then
`models.training.run`.
"""
import sys

import tensorflow as tf

from models import config as run_config
from models import flags
from models import training


def run_script(build, model_name, synthetic_image_shape, defaults,
               description=None):
  """The `__main__` of a model script: graph mode, then `main` on the
  command line.

  Args:
    build: the script's `build(image_shape, num_classes, learning_rate)`.
    model_name: names the run, and the module (`python -m
      models.<model_name>`).
    synthetic_image_shape: the image shape of --data=synthetic.
    defaults: the script's flag defaults (see `flags.parser`).
    description: what `--help` says the script is.
  """
  tf.compat.v1.disable_eager_execution()
  main(sys.argv[1:], build, model_name, synthetic_image_shape, defaults,
       description)


def main(argv, build, model_name, synthetic_image_shape, defaults,
         description=None):
  """Trains the model as the command-line arguments `argv` say.

  Args:
    argv: the arguments, without the program's name.
    build, model_name, synthetic_image_shape, defaults, description: as
      for `run_script`.

  Returns:
    `models.training.train`'s dict.

  Raises:
    SystemExit: bad arguments (status 2, argparse's message), or a data
      set that cannot be loaded (the message says why, without a
      traceback).
  """
  config = flags.parse(argv, prog=f"python -m models.{model_name}",
                       description=description, **defaults)
  try:
    dataset = run_config.load_data(config, synthetic_image_shape)
  except (ValueError, OSError) as e:
    # A missing --data_dir or file is the user's to fix, not a crash.
    sys.exit(f"{model_name}: cannot load {config.data}: {e}")
  return training.run(build, model_name, synthetic_image_shape, config,
                      dataset)
