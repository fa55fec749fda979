"""What the event files of one folder hold for ``tfthroughput report``: the scalars, and the
latest diagnosis and ``tune`` result written there as text.

Read with TensorBoard's own reader (``EventAccumulator``), which needs no TensorFlow.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

# The text tag DiagnosisReport.write_to_tensorboard writes.
DIAGNOSIS_TAG = "diagnosis/report"
# The text tag TuneResult.write_to_tensorboard writes (tfthroughput.tune(log_dir=...)).
TUNE_TAG = "tune/result"


@dataclass(frozen=True)
class FolderEvents:
    """What one folder's event files hold, as far as the report is concerned."""

    scalars: dict[str, tuple[tuple[int, float], ...]]
    diagnosis: tuple[float, str] | None  # (wall time, text) of the latest diagnosis
    first_written: float
    tuning: tuple[float, str] | None = None  # (wall time, text) of the latest tune result


def load_folder_events(folder: str) -> FolderEvents:
    from tensorboard.backend.event_processing import plugin_event_accumulator as accumulator
    from tensorboard.util import tensor_util

    events = accumulator.EventAccumulator(
        folder, size_guidance=accumulator.STORE_EVERYTHING_SIZE_GUIDANCE
    )
    events.Reload()
    scalars: dict[str, tuple[tuple[int, float], ...]] = {}
    diagnosis = tuning = None
    # The first summary's time, not FirstEventTimestamp(): the file header event's is whole
    # seconds, which ties runs written within the same second.
    first_written = float("inf")
    for tag in events.Tags()[accumulator.TENSORS]:
        first_written = min([first_written, *(event.wall_time for event in events.Tensors(tag))])
        plugin = events.SummaryMetadata(tag).plugin_data.plugin_name
        if plugin == "scalars":
            by_step = {  # a step written twice keeps its last value, as TensorBoard shows it
                event.step: float(tensor_util.make_ndarray(event.tensor_proto))
                for event in events.Tensors(tag)
            }
            scalars[tag] = tuple(sorted(by_step.items()))
        elif plugin == "text" and tag == DIAGNOSIS_TAG:
            latest = max(events.Tensors(tag), key=lambda event: event.wall_time)
            diagnosis = (latest.wall_time, _text(tensor_util.make_ndarray(latest.tensor_proto)))
        elif plugin == "text" and tag == TUNE_TAG:
            latest = max(events.Tensors(tag), key=lambda event: event.wall_time)
            text = _text(tensor_util.make_ndarray(latest.tensor_proto))
            tuning = (latest.wall_time, textwrap.dedent(text))  # written as a Markdown block
    return FolderEvents(scalars, diagnosis, first_written, tuning)


def _text(array) -> str:
    values = array.reshape(-1).tolist()
    return "\n".join(v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values)
