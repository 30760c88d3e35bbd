"""Several devices in one process (DESIGN.md, "Two levels: devices and
workers"): which of a session's devices `devices=[...]` names, and how the
replicas and the runtime's stream groups are placed on them.

Replica r of L lives on device r·D // L: each device takes a contiguous
run of replicas (sizes differing by at most one), and so a contiguous part
of every batch. Each device has at least one stream group; a group serves
one device and runs only its replicas' tasks (cc/runtime/scheduler.h).
"""
import collections

import tensorflow as tf


class Placement(collections.namedtuple("Placement", [
    "names",  # per device, its full TensorFlow name
    "group_device",  # per stream group, the index of its device
    "replica_device",  # per replica, the index of its device
])):
  """Where one setting's replicas and stream groups are."""

  @property
  def num_devices(self):
    return len(self.names)

  def replicas_of(self, device):
    """The replicas on device index `device`, in order."""
    return [r for r, d in enumerate(self.replica_device) if d == device]

  def group_names(self):
    """Per stream group, the name of its device."""
    return [self.names[d] for d in self.group_device]


def check(devices):
  """Checks the form of a session's `devices` option; returns it as a
  tuple, or None for one device as TensorFlow places it.

  Raises:
    ValueError: not a list of device names, or a name given twice.
  """
  if devices is None:
    return None
  if isinstance(devices, (str, bytes)) or not isinstance(devices,
                                                          (list, tuple)):
    raise ValueError("devices must be a list of device names such as "
                     f"['/cpu:0', '/cpu:1'], got {devices!r}")
  if not devices or not all(isinstance(d, str) for d in devices):
    raise ValueError("devices must be a non-empty list of device names, got "
                     f"{devices!r}")
  return tuple(devices)


def cpus_needed(devices):
  """How many logical CPU devices of this process the device names
  `devices` (or None) need: one past the highest /cpu:k named, 0 if none
  is a local CPU."""
  needed = 0
  for name in devices or ():
    spec = tf.DeviceSpec.from_string(name)
    if (spec.device_type or "").upper() == "CPU" and not spec.job:
      needed = max(needed, (spec.device_index or 0) + 1)
  return needed


def resolve(devices, available):
  """The full names of `devices` (names as the user gives them) among
  `available` (a session's device names).

  Raises:
    ValueError: a name matches no device, or two name the same one.
  """
  found = []
  for name in devices:
    try:
      spec = tf.DeviceSpec.from_string(name)
    except ValueError as e:
      raise ValueError(f"devices: {name!r} is not a device name ({e})") from e
    matches = [a for a in available if _matches(spec, a)]
    if len(matches) != 1:
      raise ValueError(
          f"devices: {name!r} names {'no' if not matches else 'more than one'}"
          f" device of this session; it has {', '.join(available)}")
    if matches[0] in found:
      raise ValueError(f"devices: {matches[0]} is named twice in {devices!r}")
    found.append(matches[0])
  return found


def _matches(spec, name):
  """Whether device `name` is what DeviceSpec `spec` names."""
  full = tf.DeviceSpec.from_string(name)
  return all(
      want is None or (want.upper() == got.upper() if isinstance(want, str)
                       else want == got)
      for want, got in ((spec.job, full.job), (spec.replica, full.replica),
                        (spec.task, full.task),
                        (spec.device_type, full.device_type),
                        (spec.device_index, full.device_index)))


def place(names, replicas, stream_groups):
  """The Placement of `replicas` replicas and at least `stream_groups`
  stream groups (rounded up to a multiple of the devices) on devices
  `names`."""
  count = len(names)
  per_device = max(1, -(-stream_groups // count))
  return Placement(
      list(names),
      [g // per_device for g in range(per_device * count)],
      [r * count // replicas for r in range(replicas)])


def cpu_devices(session):
  """`session`'s CPU devices, CPU:0 first."""
  cpus = [d.name for d in session.list_devices() if d.device_type == "CPU"]
  return sorted(cpus, key=lambda n: int(n.rsplit(":", 1)[1]))
