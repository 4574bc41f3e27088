"""Watching a long run: segments with a callback, and a progress bar.

With ``every=N`` a run is cut into segments of N steps, each run by the
engine as a call of its own (so the result is the same, bit for bit,
with or without a callback: the fused passes end where the segments
do), and ``callback(step, grid)`` sees the state after each one.  The
progress bar needs no segments: the engines report the steps done
through the same poll that catches Ctrl-C, at most every 0.1 s.
"""
import numbers
import sys
import time

UPDATE_SECONDS = 0.1  # the plain counter's fastest refresh


def resolve_every(every, callback, steps):
    """Checked (every, callback): every is None or an int >= 1."""
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable as callback(step, grid), "
                        "got %s" % type(callback).__name__)
    if every is None:
        if callback is not None:
            raise TypeError("callback= needs every=N (call it after every "
                            "N steps)")
        return None, None
    if isinstance(every, bool) or not isinstance(every, numbers.Integral):
        raise TypeError("every must be a positive integer, got %r"
                        % (every,))
    every = int(every)
    if every < 1:
        raise ValueError("every must be a positive integer, got %d" % every)
    return every, callback


def run_segments(steps, every, first, last, new_buffer, run, report,
                 bar=None):
    """Advance `first` by `steps` into `last`, `every` steps at a time.

    ``run(src, dst, n, done)`` advances src by n steps into dst (`done`
    steps are behind it); ``report(step, state)`` is called after each
    segment that ends on a multiple of `every`.  Intermediate states go
    to (at most two) buffers from ``new_buffer()``; only the last segment
    writes `last`, so an exception leaves `last` as it was until then.
    `bar` (a Progress) is shown each segment's end, however fast it ran.
    """
    if steps == 0 or every is None:
        run(first, last, steps, 0)
        return last
    count = -(-steps // every)
    spare = [None, None]
    src, done = first, 0
    for i in range(count):
        n = min(every, steps - done)
        if i == count - 1:
            dst = last
        else:
            if spare[i % 2] is None:
                spare[i % 2] = new_buffer()
            dst = spare[i % 2]
        run(src, dst, n, done)
        done += n
        if bar is not None:
            bar.reached(done)
        if report is not None and done % every == 0:
            report(done, dst)
        src = dst
    return last


class Progress:
    """A progress bar over `total` steps: tqdm when installed, else a
    one-line counter on stderr refreshed at most 10 times a second."""

    def __init__(self, total, enabled):
        self.total = total
        self.enabled = enabled and total > 0
        self.done = 0
        self.bar = None
        self.last_draw = 0.0
        self.last_draw_step = -1
        if not self.enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self.bar = tqdm(total=total, unit="step", desc="convstencil",
                            mininterval=UPDATE_SECONDS)

    def offset(self, base):
        """The engine's progress function for a segment `base` steps in
        (None when disabled, so the engine polls nothing for it)."""
        if not self.enabled:
            return None
        return lambda done: self.update(base + done)

    def update(self, done):
        if not self.enabled or done <= self.done:
            return
        if self.bar is not None:
            self.bar.update(done - self.done)
            self.done = done
            return
        self.done = done
        now = time.monotonic()
        if now - self.last_draw >= UPDATE_SECONDS or done == self.total:
            self._draw(done)

    def _draw(self, done):
        self.last_draw = time.monotonic()
        self.last_draw_step = done
        sys.stderr.write("\rconvstencil: %d/%d steps (%d%%)"
                         % (done, self.total, 100 * done // self.total))
        sys.stderr.flush()

    def reached(self, done):
        """Show `done` steps now (a segment's end): the engine's reports
        come at most every UPDATE_SECONDS, so a fast segment would
        otherwise pass unseen."""
        self.update(done)
        if self.enabled and self.bar is None and self.last_draw_step != done:
            self._draw(done)

    def close(self, finished):
        if not self.enabled:
            return
        if finished:
            self.update(self.total)
        if self.bar is not None:
            self.bar.close()
        else:
            sys.stderr.write("\n")
            sys.stderr.flush()
