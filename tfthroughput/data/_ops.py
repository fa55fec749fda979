"""tf.data op names of TensorFlow 2.21: what kind of stage each is, and where its arguments sit.

Read from the ops' definitions and checked against the graphs TensorFlow serialises and the
iterators its profiler records.
"""

from __future__ import annotations

import re

AUTOTUNE = -1

# Added by tf.data (options, autotuning, thread pools); they are not stages a user wrote.
TRANSPARENT = frozenset(
    {
        "OptionsDataset",
        "ModelDataset",
        "OptimizeDataset",
        "OptimizeDatasetV2",
        "FinalizeDataset",
        "MaxIntraOpParallelismDataset",
        "PrivateThreadPoolDataset",
        "AssertNextDataset",
        "ExperimentalAssertNextDataset",
    }
)
ASYNC_OPS = frozenset(
    {
        "PrefetchDataset",
        "ParallelMapDataset",
        "ParallelMapDatasetV2",
        "ParallelInterleaveDatasetV2",
        "ParallelInterleaveDatasetV3",
        "ParallelInterleaveDatasetV4",
        "ParallelBatchDataset",
        "MapAndBatchDataset",
        "ExperimentalMapAndBatchDataset",
    }
)
MAP_OPS = frozenset({"MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2"})
BATCH_OPS = frozenset(
    {
        "BatchDataset",
        "BatchDatasetV2",
        "ParallelBatchDataset",
        "PaddedBatchDataset",
        "PaddedBatchDatasetV2",
        "MapAndBatchDataset",
        "ExperimentalMapAndBatchDataset",
    }
)
SHUFFLE_OPS = frozenset(
    {"ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3", "ShuffleAndRepeatDatasetV2"}
)
INTERLEAVE_OPS = frozenset(
    {
        "InterleaveDataset",
        "ParallelInterleaveDatasetV2",
        "ParallelInterleaveDatasetV3",
        "ParallelInterleaveDatasetV4",
    }
)
FILE_READER_OPS = frozenset(
    {
        "TFRecordDataset",
        "TFRecordDatasetV2",
        "TextLineDataset",
        "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2",
        "CSVDataset",
        "CSVDatasetV2",
        "ExperimentalCSVDataset",
    }
)
TRANSFORMATIONS = {
    "RangeDataset": "range",
    "TensorDataset": "from_tensors",
    "TensorSliceDataset": "from_tensor_slices",
    "GeneratorDataset": "from_generator",
    "RandomDataset": "Dataset.random",
    "RandomDatasetV2": "Dataset.random",
    "FilterDataset": "filter",
    "ParallelFilterDataset": "filter",
    "FlatMapDataset": "flat_map",
    "UnbatchDataset": "unbatch",
    "PaddedBatchDataset": "padded_batch",
    "PaddedBatchDatasetV2": "padded_batch",
    "MapAndBatchDataset": "map_and_batch",
    "ExperimentalMapAndBatchDataset": "map_and_batch",
    "CacheDataset": "cache",
    "CacheDatasetV2": "cache",
    "RepeatDataset": "repeat",
    "PrefetchDataset": "prefetch",
    "TakeDataset": "take",
    "SkipDataset": "skip",
    "ZipDataset": "zip",
    "ConcatenateDataset": "concatenate",
    "ShuffleAndRepeatDatasetV2": "shuffle+repeat",
    **{op: "map" for op in MAP_OPS},
    **{op: "batch" for op in ("BatchDataset", "BatchDatasetV2", "ParallelBatchDataset")},
    **{op: "shuffle" for op in ("ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3")},
    **{op: "interleave" for op in INTERLEAVE_OPS},
    **{op: "TFRecordDataset" for op in ("TFRecordDataset", "TFRecordDatasetV2")},
}
# Ops whose result differs from call to call (seeded or not). Stateless random ops are left out:
# given their seed input they always return the same values.
_RANDOM_OP = re.compile(r"^(?!Stateless)(Random|Stateful(?!PartitionedCall)|Rng)")
_RANDOM_NAMES = frozenset({"Multinomial", "ParameterizedTruncatedNormal", "TruncatedNormal"})
LOOP_OPS = frozenset({"While", "StatelessWhile"})


def is_random(op: str) -> bool:
    return bool(_RANDOM_OP.search(op)) or op in _RANDOM_NAMES


DATASET_SUFFIXES = ("Dataset", "DatasetV2", "DatasetV3", "DatasetV4")

# Where each scalar argument sits among an op's inputs (negative: counted from the end, past
# the function's captured inputs).
ARGUMENT_POSITIONS: dict[str, dict[str, int]] = {
    "ParallelMapDataset": {"num_parallel_calls": -1},
    "ParallelMapDatasetV2": {"num_parallel_calls": -1},
    "InterleaveDataset": {"cycle_length": -2, "block_length": -1},
    "ParallelInterleaveDatasetV2": {"cycle_length": -3, "num_parallel_calls": -1},
    "ParallelInterleaveDatasetV3": {"cycle_length": -3, "num_parallel_calls": -1},
    "ParallelInterleaveDatasetV4": {"cycle_length": -5, "num_parallel_calls": -1},
    "BatchDataset": {"batch_size": 1},
    "BatchDatasetV2": {"batch_size": 1},
    "ParallelBatchDataset": {"batch_size": 1, "num_parallel_calls": 2},
    "PaddedBatchDataset": {"batch_size": 1},
    "PaddedBatchDatasetV2": {"batch_size": 1},
    "MapAndBatchDataset": {"batch_size": -3, "num_parallel_calls": -2},
    "ExperimentalMapAndBatchDataset": {"batch_size": -3, "num_parallel_calls": -2},
    "ShuffleDataset": {"buffer_size": 1, "seed": 2, "seed2": 3},
    "ShuffleDatasetV2": {"buffer_size": 1},
    "ShuffleDatasetV3": {"buffer_size": 1, "seed": 2, "seed2": 3},
    "ShuffleAndRepeatDatasetV2": {"buffer_size": 1, "seed": 2, "seed2": 3},
    "PrefetchDataset": {"buffer_size": 1},
}
