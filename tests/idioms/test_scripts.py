"""A few idioms as whole scripts under `tensorbow-run --replicas 4` and
`--replicas auto`, where #42's defects were found: each exits 0 and
trains (its loss on a fixed batch falls)."""
import json
import os
import subprocess
import sys

import pytest

from children import child_env

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Trains idiom {module}.{name} on run 0's batch for {runs} runs with
# tf.compat.v1.Session (which tensorbow-run replaces).
SCRIPT = """\
import json
import sys

import tensorflow as tf
{mode}
from idioms import harness
from idioms import {module} as module

idiom = [i for i in module.CORPUS.idioms if i.name == {name!r}][0]
graph, case, init = harness.build(idiom)
with graph.as_default(), tf.compat.v1.Session() as sess:
  sess.run(init)
  feed = case.feed_at(0)
  fetches = case.fetches_at(0)
  losses = [float(sess.run(fetches, feed)[0]) for _ in range({runs})]
with open(sys.argv[1], "w") as f:
  json.dump(losses, f)
"""

IDIOMS = [
    ("test_transforms", "clip_by_global_norm_adam_decay", None),
    ("test_state", "batch_norm_update_ops", None),
    ("test_control_flow", "embedding_adam", None),
    ("test_state", "moving_average_after_step", None),
]


def params():
  out = []
  for module, name, defect in IDIOMS:
    for replicas in ("4", "auto"):
      marks = [defect.mark("script")] if defect else []
      out.append(pytest.param(module, name, replicas, marks=marks,
                              id=f"{name}-{replicas}"))
  return out


@pytest.mark.slow
@pytest.mark.parametrize("module,name,replicas", params())
def test_script_trains(module, name, replicas, tmp_path, tf_mode_statement):
  script = tmp_path / "idiom.py"
  script.write_text(SCRIPT.format(mode=tf_mode_statement, module=module,
                                  name=name, runs=8))
  out = tmp_path / "losses.json"
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--replicas", replicas,
       str(script), str(out)],
      # The package, and tests/ for the corpus's `idioms` package.
      env=child_env(TESTS), cwd=tmp_path, capture_output=True, text=True,
      timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "TensorBowSession" in done.stderr, done.stderr[-2000:]
  with open(out) as f:
    losses = json.load(f)
  assert losses[-1] < losses[0], losses
