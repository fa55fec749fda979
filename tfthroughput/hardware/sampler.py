"""Background sampling of sources into windows of per-metric statistics.

The sampler imports neither TensorFlow nor Keras: it runs under plain Python with pynvml and
psutil, so it can be used outside Keras and checked on machines without TensorFlow.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterable
from numbers import Real

from tfthroughput.hardware.source import MonitoringWarning, Reading, Source, SourceLost
from tfthroughput.hardware.window_stats import SampleKey, SampleStore, WindowStats, check_reading

MIN_INTERVAL_SECONDS = 0.05


def validate_interval(interval: object) -> float:
    """Check a sampling interval in seconds; returns it as a float.

    Raises:
        TypeError: If it is not a real number (booleans are rejected).
        ValueError: If it is below ``MIN_INTERVAL_SECONDS`` (0.05 s).
    """
    if isinstance(interval, bool) or not isinstance(interval, Real):
        raise TypeError(f"`interval` must be a number of seconds. Received: interval={interval!r}")
    if not interval > 0:
        raise ValueError(
            f"`interval` must be a positive number of seconds. Received: interval={interval!r}"
        )
    if interval < MIN_INTERVAL_SECONDS:
        raise ValueError(
            f"`interval` must be at least {MIN_INTERVAL_SECONDS} s: NVML's counters do not "
            f"update faster. Received: interval={interval!r}"
        )
    return float(interval)


class Sampler:
    """Reads every source at a fixed interval on a daemon thread and keeps a window of samples.

    Samples are keyed by :class:`SampleKey` ``(source name, metric)``, e.g.
    ``SampleKey("gpu0", "utilization_percent")``.
    :meth:`collect` summarises the window since the previous call and starts a new one. Samples
    a source reports with their own times (NVML's sample buffers) are filed by those times, so
    a window holds every such sample taken inside it, whatever ``interval`` is.
    A fault in a source never leaves the thread: a lost source is dropped with one warning,
    any other error is warned about once per source and kind, and sampling goes on.

    Args:
        sources: The sources to read (see :mod:`tfthroughput.hardware.discovery`).
        interval: Seconds between samples. Defaults to 1.0; at least 0.05.
        keep_running: Optional predicate checked before each sample; when it returns False
            the sampler calls ``on_abandoned`` and its thread ends. Adapters use it to notice
            that the code they monitor has stopped without telling them.
        on_abandoned: Called on the sampler thread when ``keep_running`` returns False.
        on_sample: Called on the sampler thread after each sample the thread takes (not after
            ``sample_once`` or ``collect(sample_now=True)`` calls from other threads), with no
            lock held. Adapters use it to cut windows by time without a hook in the training
            loop. It must be quick; an exception from it is warned about once and sampling
            goes on.
        clock: Monotonic seconds, the clock windows are cut by (buffered samples are placed
            on it by their age), injectable for tests. Defaults to ``time.monotonic``.

    Example:
        >>> import time
        >>> from tfthroughput.hardware.host import HostSource
        >>> with Sampler([HostSource()], interval=0.1) as sampler:
        ...     time.sleep(0.5)
        ...     stats = sampler.collect()
        >>> stats[SampleKey("host", "cpu_percent")].count >= 1
        True
    """

    def __init__(
        self,
        sources: Iterable[Source],
        interval: float = 1.0,
        *,
        keep_running: Callable[[], bool] | None = None,
        on_abandoned: Callable[[], None] | None = None,
        on_sample: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = validate_interval(interval)
        self._sources = list(sources)
        for source in self._sources:
            if not isinstance(source, Source):
                raise TypeError(
                    "`sources` must contain objects with `name`, `read()` and `close()`. "
                    f"Received: {source!r}"
                )
        self._keep_running = keep_running
        self._on_abandoned = on_abandoned
        self._on_sample = on_sample
        self._clock = clock
        self._lock = threading.Lock()
        # Serialises whole samples: `collect(sample_now=True)` on the training thread may run
        # while the sampler thread samples, and sources are not thread-safe (a lost source
        # would also be dropped twice, the second `remove` raising).
        self._sample_lock = threading.Lock()
        self._store = SampleStore(clock())
        self._warned: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: dict[str, str] = {}

    @property
    def source_names(self) -> list[str]:
        return [source.name for source in self._sources]

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def sample_once(self) -> None:
        """Read every source once and add the values to the current window."""
        with self._sample_lock:
            readings: list[tuple[SampleKey, Reading]] = []
            for source in list(self._sources):
                try:
                    values = source.read()
                    checked = [
                        (SampleKey(source.name, metric), check_reading(value))
                        for metric, value in values.items()
                    ]
                except SourceLost as error:
                    self._drop(source, str(error))
                    continue
                except Exception as error:  # noqa: BLE001 - sampling must never break training
                    self._warn_once(source.name, type(error).__name__, f"{source.name}: {error!r}")
                    continue
                readings.extend(checked)
            with self._lock:
                # Timed samples carry their age at the read; the sampler's clock now, minus
                # that age, is when they were taken on the clock its windows are cut by.
                now = self._clock()
                for key, reading in readings:
                    self._store.add(key, reading, now)

    def collect(self, *, sample_now: bool = False) -> WindowStats:
        """Summarise the samples since the last call and start a new window.

        Args:
            sample_now: Take one sample first, so that a window shorter than the interval
                still has a value, and so that hardware samples taken since the last read are
                filed into this window: read after the cut, they would belong to a window
                already summarised and be dropped. Defaults to False.

        Returns:
            Statistics per :class:`SampleKey` with at least one sample: a ``dict`` whose
            ``buffer_samples`` attribute counts, for metrics read from a hardware sample
            buffer, that buffer's samples in the window.
        """
        if sample_now:
            self.sample_once()
        with self._lock:
            return self._store.cut(self._clock())

    def start(self) -> Sampler:
        """Start the sampling thread (idempotent while running)."""
        if self.running:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tfthroughput-sampler", daemon=True)
        self._thread.start()
        return self

    def watching(self) -> bool:
        """Whether the code this sampler watches still runs, asked now (``keep_running``) rather
        than at the next sample; True where it watches nothing."""
        return self._keep_running is None or bool(self._keep_running())

    def stop(self) -> None:
        """Stop the thread and close the sources. Samples already taken stay collectable."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._close_sources()

    def _close_sources(self) -> None:
        for source in self._sources:
            try:
                source.close()
            except Exception as error:  # noqa: BLE001
                self._warn_once(source.name, "close", f"{source.name}: closing failed: {error!r}")

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                if self._keep_running is not None and not self._keep_running():
                    self._stop.set()
                    if self._on_abandoned is not None:
                        self._on_abandoned()
                    self._close_sources()
                    return
                self.sample_once()
                if self._on_sample is not None:
                    self._after_sample()
        except Exception as error:  # noqa: BLE001 - last line of defence for the thread
            self._warn_once("sampler", type(error).__name__, f"sampling stopped: {error!r}")

    def _after_sample(self) -> None:
        try:
            self._on_sample()
        except Exception as error:  # noqa: BLE001 - the adapter's fault must not stop sampling
            self._warn_once("on_sample", type(error).__name__, f"on_sample failed: {error!r}")

    def _drop(self, source: Source, reason: str) -> None:
        self._sources.remove(source)
        self.lost[source.name] = reason
        warnings.warn(reason, MonitoringWarning, stacklevel=3)
        try:
            source.close()
        except Exception:  # noqa: BLE001 - a lost device may fail to close; it is gone anyway
            pass

    def _warn_once(self, source_name: str, kind: str, message: str) -> None:
        if (source_name, kind) not in self._warned:
            self._warned.add((source_name, kind))
            warnings.warn(message, MonitoringWarning, stacklevel=3)
