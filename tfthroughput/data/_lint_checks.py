"""The checks of :func:`tfthroughput.lint_pipeline`, one function per kind of mistake."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tfthroughput.data._graph import DatasetGraph, Stage
from tfthroughput.data._ops import AUTOTUNE, BATCH_OPS, INTERLEAVE_OPS, MAP_OPS, SHUFFLE_OPS
from tfthroughput.data._rewrites import (
    autotune_cycle_length,
    autotune_on,
    map_parallelization_reason,
    prefetch_injected,
    runs_async,
    runs_in_parallel,
    schedulable_cores,
)


@dataclass(frozen=True)
class LintFinding:
    """One thing in a pipeline that costs throughput, and the change that fixes it.

    Attributes:
        rule: Short name of the check, e.g. ``"sequential-map"``.
        position: The stage's position, counted from 1 at the source.
        op: The TensorFlow op of the stage, e.g. ``"MapDataset"``.
        transformation: The stage as written, e.g. ``"map(decode)"``.
        problem: What is wrong and what it costs.
        fix: What to change: a :func:`tfthroughput.build_pipeline` option or a ``tf.data`` call.
    """

    rule: str
    position: int
    op: str
    transformation: str
    problem: str
    fix: str

    @property
    def stage(self) -> str:
        """``"stage 2: map(decode) (MapDataset)"``."""
        return f"stage {self.position}: {self.transformation} ({self.op})"

    def __str__(self) -> str:
        return f"{self.stage}\n  problem: {self.problem}\n  fix: {self.fix}"


_PARALLEL_OPS = frozenset(
    {"ParallelMapDatasetV2", "ParallelBatchDataset", *INTERLEAVE_OPS} - {"InterleaveDataset"}
)


def _finding(rule: str, stage: Stage, problem: str, fix: str) -> LintFinding:
    return LintFinding(rule, stage.position, stage.op, stage.transformation, problem, fix)


def _is_batched(graph: DatasetGraph, stage: Stage) -> Stage | None:
    """The nearest ``batch`` stage upstream of ``stage``, if any."""
    return next((s for s in graph.upstream(stage) if s.op in BATCH_OPS), None)


# ------------------------------------------------------------------------------- checks


def _final_prefetch(graph: DatasetGraph) -> Iterator[LintFinding]:
    last = graph.last
    if last.op == "PrefetchDataset" or prefetch_injected(graph):
        return
    if runs_async(graph, last):
        fused = " (tf.data fuses it with the map before it into one MapAndBatch stage)" * (
            last.op in ("BatchDataset", "BatchDatasetV2")
        )
        problem = (
            f"the pipeline ends with an asynchronous stage{fused}, after which tf.data's "
            "inject_prefetch adds no prefetch; its buffer holds only the calls in flight, so a "
            "slow element or a fast run of training steps empties it and the step waits."
        )
    else:
        why = "autotuning is off" if not autotune_on(graph) else "inject_prefetch is switched off"
        problem = (
            f"the pipeline does not end with prefetch, and tf.data adds none ({why}): the "
            "training step and the input pipeline take turns instead of overlapping."
        )
    yield _finding(
        "no-final-prefetch",
        last,
        problem,
        "end with .prefetch(tf.data.AUTOTUNE) (build_pipeline always does).",
    )


def _sequential_maps(graph: DatasetGraph) -> Iterator[LintFinding]:
    for stage in graph.stages:
        if stage.op not in MAP_OPS or runs_in_parallel(graph, stage):
            continue
        batch = _is_batched(graph, stage)
        if stage.op == "MapDataset":
            why = f"tf.data leaves it sequential because {map_parallelization_reason(graph, stage)}"
        else:
            why = "it was made with num_parallel_calls=1"
        if batch is None:
            what = "this per-example map runs one element at a time"
            option = (
                "pass the function to build_pipeline as preprocess_fn (deterministic work) "
                "or augment_fn (random work)"
            )
        else:
            what = "this per-batch map runs one batch at a time"
            option = "pass the function to build_pipeline as batch_fn"
        yield _finding(
            "sequential-map",
            stage,
            f"{what}: {why}.",
            f"map(..., num_parallel_calls=tf.data.AUTOTUNE), or {option}.",
        )


def _cache_placement(graph: DatasetGraph) -> Iterator[LintFinding]:
    for stage in graph.stages:
        if stage.op not in ("CacheDataset", "CacheDatasetV2"):
            continue
        upstream = graph.upstream(stage)
        random_stage = next((s for s in upstream if graph.is_random(s)), None)
        if random_stage is not None:
            what = "a shuffle" if random_stage.op in SHUFFLE_OPS else "random ops"
            yield _finding(
                "cache-after-random",
                stage,
                f"it caches the output of {random_stage} ({what}): every epoch after the "
                "first replays the first epoch's order and random draws.",
                "cache before the shuffle and the random work: build_pipeline(preprocess_fn="
                "..., cache=True, shuffle_buffer=..., augment_fn=...) orders them so.",
            )
        batch = _is_batched(graph, stage)
        if batch is not None:
            yield _finding(
                "cache-after-batch",
                stage,
                f"it caches whole batches from {batch}: every epoch gets the same batches "
                "(a later shuffle only reorders them).",
                "cache the examples before batch: .cache().shuffle(...).batch(...) "
                "(build_pipeline(cache=True, shuffle_buffer=..., batch_size=...)).",
            )


def _shuffle_placement(graph: DatasetGraph) -> Iterator[LintFinding]:
    for stage in graph.stages:
        if stage.op not in SHUFFLE_OPS:
            continue
        batch = _is_batched(graph, stage)
        if batch is not None:
            yield _finding(
                "shuffle-after-batch",
                stage,
                f"it shuffles whole batches made by {batch}: the same examples share a batch "
                "in every epoch.",
                "shuffle the examples before batch: .shuffle(buffer_size).batch(batch_size) "
                "(build_pipeline(shuffle_buffer=...) places it there).",
            )
            continue
        buffer_size = graph.argument(stage, "buffer_size")
        later_batch = _next_batch_of_the_same_elements(graph, stage)
        batch_size = None if later_batch is None else graph.argument(later_batch, "batch_size")
        if buffer_size is not None and batch_size is not None and 0 < buffer_size < batch_size:
            yield _finding(
                "small-shuffle-buffer",
                stage,
                f"its buffer holds {buffer_size} examples, fewer than one batch of "
                f"{batch_size} ({later_batch}): each batch is drawn from barely more than "
                "its own examples, in nearly the source order.",
                "a shuffle buffer of many batches (ideally the dataset size, if it fits in "
                "memory): shuffle(buffer_size=...) / build_pipeline(shuffle_buffer=...).",
            )


# Stages after which an element is something else: an interleave or flat_map turns each element
# (a file name, say) into a dataset of its own elements (records); unbatch splits a batch.
_ELEMENT_CHANGING_OPS = frozenset({*INTERLEAVE_OPS, "FlatMapDataset", "UnbatchDataset"})


def _next_batch_of_the_same_elements(graph: DatasetGraph, stage: Stage) -> Stage | None:
    """The first ``batch`` after ``stage`` that batches the elements ``stage`` outputs.

    None when there is no batch, or when an interleave, flat_map or unbatch comes first: a
    shuffle of file names followed by ``interleave(TFRecordDataset)`` holds files, not the
    examples the batch counts, so its buffer and the batch size are not comparable.
    """
    for later in graph.downstream(stage):
        if later.op in _ELEMENT_CHANGING_OPS:
            return None
        if later.op in BATCH_OPS:
            return later
    return None


def _file_reads(graph: DatasetGraph) -> Iterator[LintFinding]:
    for stage in graph.stages:
        if stage.op not in (*INTERLEAVE_OPS, "FlatMapDataset") or graph.is_generator(stage.node):
            continue
        if not graph.reads_files(stage) or graph.file_count(stage) == 1:
            continue
        if stage.op == "FlatMapDataset":
            how = "flat_map reads the files one after the other"
        else:
            if graph.cycle_length(stage) != 1:
                continue
            how = "its cycle length is 1, so it reads one file at a time" + (
                f" (what cycle_length=AUTOTUNE is fixed to when the dataset is made on "
                f"{schedulable_cores()} cores: ceil(cores / 3))"
                if stage.op != "InterleaveDataset"
                and graph.argument(stage, "num_parallel_calls") == AUTOTUNE
                and autotune_cycle_length(parallel=True) == 1
                else ""
            )
        yield _finding(
            "sequential-file-reads",
            stage,
            f"{how}; with slow or remote storage, reading is the bottleneck.",
            "read several files at once with an explicit count: build_pipeline(files, "
            "parallel_reads=N), interleave(..., cycle_length=N, num_parallel_calls="
            "tf.data.AUTOTUNE), or TFRecordDataset(files, num_parallel_reads=N), N > 1.",
        )


def _determinism(graph: DatasetGraph) -> Iterator[LintFinding]:
    unseeded = [
        s
        for s in graph.stages
        if (
            s.op in SHUFFLE_OPS
            and graph.argument(s, "seed") == 0
            and graph.argument(s, "seed2") == 0
        )
        or graph.unseeded_random_ops(s)
    ]
    if not unseeded:
        return
    default = graph.options.deterministic is not False
    for stage in graph.stages:
        if stage.op not in _PARALLEL_OPS:
            continue
        calls = graph.argument(stage, "num_parallel_calls")
        if calls is not None and calls not in (AUTOTUNE,) and calls <= 1:
            continue
        setting = graph.attr_string(stage, "deterministic") or "default"
        if setting == "false" or (setting == "default" and not default):
            continue
        drawn = (
            "shuffles without a seed"
            if unseeded[0].op in SHUFFLE_OPS
            else "draws random values without a seed"
        )
        source = (
            "deterministic=True"
            if setting == "true"
            else "tf.data's default, Options.deterministic=True"
        )
        yield _finding(
            "deterministic-without-seed",
            stage,
            f"it keeps the input order ({source}), so a slow element holds back the ones "
            f"ready after it, yet {unseeded[0]} {drawn}: the data differs from run to run "
            "anyway.",
            "deterministic=False on this stage, or options.deterministic=False for the "
            "pipeline (build_pipeline's default); keep the order only with seeded randomness "
            "(shuffle(..., seed=...)) when runs must repeat exactly.",
        )


def _work_after_batch(graph: DatasetGraph) -> Iterator[LintFinding]:
    for stage in graph.stages:
        batch = _is_batched(graph, stage)
        if batch is None:
            continue
        if stage.op in MAP_OPS and graph.has_loop(stage):
            problem = (
                f"its function loops over the examples of each batch from {batch} "
                "(tf.map_fn or a while loop): the per-example work runs one example at a time "
                "inside a single call."
            )
        elif stage.op == "UnbatchDataset":
            problem = (
                f"it splits the batches of {batch} back into examples: the work between "
                "them was per-example after all."
            )
        else:
            continue
        yield _finding(
            "per-example-work-after-batch",
            stage,
            problem,
            "do per-example work before batch in a parallel map (build_pipeline's "
            "preprocess_fn / augment_fn), and keep only vectorised work after it (batch_fn).",
        )


def _generators(graph: DatasetGraph) -> Iterator[LintFinding]:
    for stage in graph.stages:
        # A generator read inside a parallel interleave is in the interleave's function, not
        # a stage of this graph, so only a top-level one is reported.
        if not graph.is_generator(stage.node):
            continue
        yield _finding(
            "sequential-generator",
            stage,
            "one Python generator produces every element, one at a time and holding the "
            "GIL: nothing after it can go faster than it yields.",
            "split the source into shards and read several at once: "
            "build_pipeline(tf.data.Dataset.range(N), read_fn=lambda i: "
            "tf.data.Dataset.from_generator(gen, args=(i,), output_signature=...), "
            "parallel_reads=N) (an interleave with cycle_length=N).",
        )


CHECKS = (
    _final_prefetch,
    _sequential_maps,
    _cache_placement,
    _shuffle_placement,
    _file_reads,
    _determinism,
    _work_after_batch,
    _generators,
)
