"""What a training run shows while it runs (models/loop.py): a
carriage-return progress bar on a TTY, plain log lines otherwise."""
import math
import time

# Without a TTY, a plain progress line at most this often (seconds).
LOG_EVERY_SECONDS = 10.0
# On a TTY, redraw the progress bar at most this often (seconds).
BAR_EVERY_SECONDS = 0.2
# The rate shown is over the steps of about the last this many seconds.
RATE_WINDOW_SECONDS = 2.0


class Progress(object):
  """A carriage-return progress bar on a TTY, plain log lines otherwise."""

  def __init__(self, stream, steps_per_epoch, epochs, verbose):
    self._stream = stream
    self._tty = verbose and hasattr(stream, "isatty") and stream.isatty()
    self._verbose = verbose
    self._steps_per_epoch = steps_per_epoch
    self._epochs = epochs
    self._last = -math.inf
    self._bar_shown = False
    self._window_start = time.monotonic()
    self._window_images = 0

  def begin(self):
    """Starts the rate's window: call when the first step starts (after
    the session's set-up)."""
    self._window_start, self._window_images = time.monotonic(), 0

  def step(self, step, images, loss, now):
    """Reports progress after `step` steps (rate-limited).

    Args:
      step: steps done.
      images: the rows of the step just done.
      loss: the mean step loss to show (one step's loss at these batch
        sizes is mostly noise).
      now: when the step ended (`time.monotonic()`).
    """
    self._window_images += images
    images_per_sec = self._window_images / max(now - self._window_start,
                                               1e-9)
    if now - self._window_start > RATE_WINDOW_SECONDS:
      self._window_start, self._window_images = now, 0
    self._show(step, images_per_sec, loss)

  def _show(self, step, images_per_sec, loss):
    if not self._verbose:
      return
    now = time.monotonic()
    if now - self._last < (BAR_EVERY_SECONDS if self._tty else
                           LOG_EVERY_SECONDS):
      return
    self._last = now
    epoch, in_epoch = divmod(step, self._steps_per_epoch)
    status = (f"step {step} | {images_per_sec:8.1f} img/s | "
              f"loss {loss:.4f}")
    if self._tty:
      width = 20
      done = int(width * in_epoch / self._steps_per_epoch)
      of = f"/{self._epochs}" if self._epochs is not None else ""
      self._stream.write(f"\repoch {epoch + 1}{of} "
                         f"[{'#' * done}{'.' * (width - done)}] {status}"
                         "\x1b[K")
      self._bar_shown = True
    else:
      self._stream.write(f"epoch {step / self._steps_per_epoch:.2f}: "
                         f"{status}\n")
    self._stream.flush()

  def line(self, text):
    """Writes a line of its own (below the bar, which is redrawn later)."""
    if not self._verbose:
      return
    if self._bar_shown:
      self._stream.write("\r\x1b[K")
      self._bar_shown = False
    self._stream.write(text + "\n")
    self._stream.flush()
    if self._tty:
      self._last = -math.inf  # Redraw the bar at the next step.
