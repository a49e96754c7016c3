"""A sample taken now and then in a background thread, while in a ``with`` block."""

from __future__ import annotations

import threading


class PeriodicSampler:
    """Calls :meth:`sample` on entry, every ``interval_s`` seconds in a background thread, and on exit.

    Subclasses define :meth:`sample` (which must be safe to call from that thread).
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample now."""
        raise NotImplementedError

    def __enter__(self):
        self.sample()
        self._done.clear()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            self.sample()
