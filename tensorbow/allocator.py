"""The process's C allocator, set for training (DESIGN.md, "The
process's allocator").

GNU libc's malloc gives a large freed block back to the system at once:
one over its mmap threshold (which it raises by itself to 32 MiB at most)
is unmapped, and free memory over the trim threshold at the top of its
heap is returned. TensorFlow copies a graph's constants -- the arrays a
script gives `tf.data.Dataset.from_tensor_slices` -- at every extension of
a session and every callable it makes, so each copy of a large one takes
fresh pages and the kernel faults on every page: on Fashion-MNIST arrays
of 63 MB, 3.6 million faults and half of a script's time
(benchmarks/RESULTS.md). `retain` raises both thresholds, so such blocks
are taken again from the heap.
"""
import ctypes
import platform

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Blocks up to this size come from the heap (freed, they stay there for
# the next ones), and up to this much free memory at its top stays with
# the process instead of going back to the system.
RETAINED_BYTES = 1 << 30


def retain(libc=None):
  """Sets glibc's thresholds to `RETAINED_BYTES`, for the rest of the
  process (mallopt has no way back to its own adjustment).

  Args:
    libc: the C library to set (None: this process's, if it is glibc).

  Returns:
    True if both were set; False where the C library is not glibc (musl,
    macOS), which is left as it is.
  """
  if libc is None:
    if platform.libc_ver()[0] != "glibc":
      return False
    libc = ctypes.CDLL(None)
  mallopt = libc.mallopt
  mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
  mallopt.restype = ctypes.c_int
  return bool(mallopt(_M_MMAP_THRESHOLD, RETAINED_BYTES) and
              mallopt(_M_TRIM_THRESHOLD, RETAINED_BYTES))
