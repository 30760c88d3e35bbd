"""`retain_memory`: the session, and `tensorbow-run` before the script,
set the process's allocator to keep large freed blocks (allocator.py).

What is checked is what the setting is for: a block of 100 MiB taken,
filled and freed again and again faults on its pages each time under
glibc's defaults, and not at all once the allocator keeps such blocks. The
sessions are made in child processes, since the setting lasts for the
process.
"""
import subprocess
import sys

import pytest

from tensorbow import allocator

from children import child_env
import cli_scripts

# Measures the minor page faults of taking a 100 MiB block (NumPy's array),
# filling it and freeing it, per block over four after a first one.
_MEASURE = """\
import resource
import sys
import numpy as np

def faults_per_block():
  np.ones(100 << 17)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  for _ in range(4):
    np.ones(100 << 17)
  return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 4
"""

# Faults per block: at least this many when the allocator maps a fresh
# block each time (25,600 pages of 4 KiB, or 50 huge pages and a few), at
# most this many when it gives the freed block back.
_FRESH, _REUSED = 40, 2


def _child(script_text):
  """Runs `script_text` in a child Python; its stdout's last line split
  into ints."""
  done = subprocess.run([sys.executable, "-c", script_text], env=child_env(),
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return [int(n) for n in done.stdout.split("\n")[-2].split()]


def test_a_session_keeps_freed_blocks_unless_told_not_to(tf_mode_statement):
  glibc, untouched, not_told, told = _child(_MEASURE + f"""
import platform
import tensorflow as tf
{tf_mode_statement}
import tensorbow
untouched = faults_per_block()
tensorbow.TensorBowSession(replicas=1, retain_memory=False).close()
not_told = faults_per_block()
tensorbow.TensorBowSession(replicas=1).close()
print(int(platform.libc_ver()[0] == "glibc"), untouched, not_told,
      faults_per_block())
""")
  assert glibc, "the setting is glibc's: this machine's C library is not"
  assert untouched >= _FRESH and not_told >= _FRESH, (untouched, not_told)
  assert told <= _REUSED, told


@pytest.mark.parametrize("flags,kept", [
    (("--replicas", "1"), True),
    (("--replicas", "1", "--no-retain-memory"), False),
])
def test_tensorbow_run_sets_it_before_the_script(tmp_path, tf_mode_statement,
                                                 flags, kept):
  stderr = cli_scripts.run_child(tmp_path, _MEASURE + f"""
import tensorflow as tf
{tf_mode_statement}
print("FAULTS", faults_per_block(), file=sys.stderr)
""", flags=flags)
  faults = int(stderr.split("FAULTS ")[1].split()[0])
  if kept:
    assert faults <= _REUSED, faults
  else:
    assert faults >= _FRESH, faults


class _Libc(object):
  """A C library whose mallopt records its calls and returns `result`."""

  def __init__(self, result):
    self.calls = []

    def mallopt(param, value):
      self.calls.append((param, value))
      return result
    self.mallopt = mallopt


@pytest.mark.mode_independent
def test_retain_sets_both_thresholds_and_says_whether_it_could():
  libc = _Libc(1)
  assert allocator.retain(libc) is True
  assert libc.calls == [(-3, 1 << 30), (-1, 1 << 30)]  # mmap, then trim
  refused = _Libc(0)
  assert allocator.retain(refused) is False
  assert refused.calls == [(-3, 1 << 30)]
