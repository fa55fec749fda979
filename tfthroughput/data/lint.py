"""Check any ``tf.data`` pipeline against TensorFlow's data performance guide, from its graph."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import tensorflow as tf

from tfthroughput._validation import check_dataset
from tfthroughput.data._graph import DatasetGraph
from tfthroughput.data._lint_checks import CHECKS, LintFinding
from tfthroughput.data._ops import INTERLEAVE_OPS
from tfthroughput.data._rewrites import prefetch_injected, runs_in_parallel


@dataclass(frozen=True)
class PipelineLint:
    """What :func:`lint_pipeline` read from a dataset's graph.

    Attributes:
        stages: The transformations as written, source first, e.g.
            ``("range (RangeDataset)", "map(decode) (MapDataset)", ...)``; a finding's
            ``position`` indexes this from 1.
        findings: The problems found, in pipeline order.
        runtime: What tf.data changes by itself when the pipeline is iterated (its default
            graph rewrites, and values it fixes when the dataset is made), as sentences.
    """

    stages: tuple[str, ...]
    findings: tuple[LintFinding, ...]
    runtime: tuple[str, ...] = ()

    @property
    def rules(self) -> tuple[str, ...]:
        """The ``rule`` of each finding, in order."""
        return tuple(finding.rule for finding in self.findings)

    def __str__(self) -> str:
        lines = ["pipeline: " + " -> ".join(s.split(" (")[0] for s in self.stages)]
        if self.findings:
            lines.append(f"{len(self.findings)} finding(s):")
            lines += [f"{i}. {finding}" for i, finding in enumerate(self.findings, 1)]
        else:
            lines.append("no findings")
        if self.runtime:
            lines.append("tf.data at run time:")
            lines += [f"- {note}" for note in self.runtime]
        return "\n".join(lines)


def lint_pipeline(dataset: tf.data.Dataset) -> PipelineLint:
    """Check a ``tf.data`` pipeline for the mistakes TensorFlow's data guide warns about.

    Reads the dataset's graph (the one TensorFlow serialises, so any dataset works, not only
    one from :func:`build_pipeline`) and walks it from the source to the last stage. Each
    finding names the stage (position and op), the problem and the fix. TensorFlow 2.21's own
    rewrites are accounted for (and listed in ``runtime``): a plain ``map`` of a stateless
    function is parallelised by tf.data itself (``map_parallelization``, with autotuning on),
    and a ``prefetch(AUTOTUNE)`` is appended after a last stage that is synchronous
    (``inject_prefetch``), so neither is reported as missing then.

    Checks:
        * ``no-final-prefetch``: the last stage is not ``prefetch`` and tf.data adds none.
        * ``sequential-map``: a ``map`` (per example, or per batch after ``batch``) that runs
          one call at a time, and why tf.data does not parallelise it.
        * ``cache-after-random`` / ``cache-after-batch``: a ``cache`` that stores a shuffle's
          or a random function's output (every epoch replays the first), or whole batches.
        * ``shuffle-after-batch`` / ``small-shuffle-buffer``: a shuffle of whole batches, or a
          buffer smaller than one batch of the same elements (a shuffle of file names before
          an ``interleave`` or ``flat_map`` that reads them is not compared with the batch).
        * ``sequential-file-reads``: an ``interleave`` or ``flat_map`` over several files that
          reads one file at a time (cycle length 1, also when ``AUTOTUNE`` fixed it to 1).
        * ``deterministic-without-seed``: a parallel stage that keeps the input order while an
          unseeded shuffle or random op makes the order differ from run to run anyway.
        * ``per-example-work-after-batch``: ``tf.map_fn`` (a loop over the examples) in a
          ``map`` after ``batch``, or an ``unbatch`` after ``batch``.
        * ``sequential-generator``: a ``from_generator`` source read by one Python generator.

    Args:
        dataset: Any ``tf.data.Dataset``.

    Returns:
        A frozen :class:`PipelineLint`; ``print()`` it for a readable list.

    Raises:
        TypeError: If ``dataset`` is not a ``tf.data.Dataset``.

    Example:
        >>> import tensorflow as tf
        >>> from tfthroughput import lint_pipeline
        >>> def jitter(x):
        ...     return x + tf.random.uniform([], 0, 2, dtype=tf.int64)
        >>> lint_pipeline(tf.data.Dataset.range(100).map(jitter).cache().batch(10)).rules
        ('sequential-map', 'cache-after-random')
    """
    check_dataset("dataset", dataset)
    graph = DatasetGraph(dataset)
    findings: list[LintFinding] = []
    for check in CHECKS:
        findings.extend(check(graph))
    findings.sort(key=lambda finding: finding.position)
    return PipelineLint(
        stages=tuple(f"{s.transformation} ({s.op})" for s in graph.stages),
        findings=tuple(findings),
        runtime=tuple(_runtime_notes(graph)),
    )


def random_stages(dataset: tf.data.Dataset) -> tuple[str, ...]:
    """The stages of ``dataset`` whose output differs from one pass to the next: a shuffle, or
    a function with random ops, named as ``str(stage)`` (``"stage 2: shuffle
    (ShuffleDatasetV3)"``), source first. ``lint_pipeline``'s ``cache-after-random`` rule and
    ``tune``'s choice whether to cache read the same thing.

    Example:
        >>> random_stages(tf.data.Dataset.range(8).shuffle(8).batch(2))
        ('stage 2: shuffle (ShuffleDatasetV3)',)
    """
    graph = DatasetGraph(dataset)
    return tuple(str(stage) for stage in graph.stages if graph.is_random(stage))


def _runtime_notes(graph: DatasetGraph) -> Iterator[str]:
    for stage in graph.stages:
        if stage.op == "MapDataset" and runs_in_parallel(graph, stage):
            yield (
                f"{stage} runs in parallel anyway: tf.data's map_parallelization rewrite "
                "(on by default, with autotuning) gives a map of a stateless function "
                "num_parallel_calls=AUTOTUNE and keeps its order (deterministic=True)."
            )
        if stage.op in INTERLEAVE_OPS:
            yield (
                f"{stage}: its cycle length, {graph.cycle_length(stage)}, was fixed when the "
                "dataset was made (cycle_length=AUTOTUNE becomes ceil(cores / 3) for a "
                "parallel interleave) and is never retuned"
                + ("; only its parallelism is." if stage.op != "InterleaveDataset" else ".")
            )
    if prefetch_injected(graph):
        yield (
            f"tf.data appends prefetch(AUTOTUNE) after {graph.last} (its inject_prefetch "
            "rewrite, on by default with autotuning, because that stage is synchronous)."
        )
