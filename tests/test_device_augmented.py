"""DeviceAugmented: the pipeline's device work runs in training steps only, on uint8 batches,
with new draws per example and per epoch; predict, evaluate and the saved model are unchanged."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data.device_augmented import DeviceAugmented
from tfthroughput.data.pipeline import build_pipeline

RNG = np.random.default_rng(1)
IMAGES = RNG.integers(0, 256, (64, 6, 6, 3), dtype=np.uint8)
LABELS = RNG.integers(0, 3, 64)
FLOATS = IMAGES.astype(np.float32) / np.float32(255)


class Recorder:
    """An augment_fn that adds a per-example shift and records, from inside the step, the
    dtype it was traced with and each shift it drew."""

    def __init__(self):
        self.dtypes, self.shifts = [], []

    def _record(self, shift):
        self.shifts.append(shift.numpy().ravel())
        return shift

    def __call__(self, images, labels):
        self.dtypes.append(images.dtype)
        shift = tf.random.uniform([tf.shape(images)[0], 1, 1, 1], 0.0, 40.0)
        shift = tf.py_function(self._record, [shift], tf.float32)
        return tf.cast(images, tf.float32) + tf.reshape(shift, [-1, 1, 1, 1]), labels


def _normalise(images, labels):
    return tf.cast(images, tf.float32) / 255.0, labels


def _model():
    inputs = keras.Input((6, 6, 3))
    outputs = keras.layers.Dense(3)(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, outputs)


def _loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(scope="module")
def trained():
    recorder = Recorder()
    dataset = build_pipeline(
        (IMAGES, LABELS),
        augment_fn=recorder,
        batch_fn=_normalise,
        augment_on="device",
        batch_size=16,
        deterministic=True,
    )
    recorder.dtypes.clear()  # the build-time probe ran it too
    recorder.shifts.clear()
    model = _model()
    initial = model.get_weights()
    trainer = DeviceAugmented(model, dataset)
    trainer.compile(optimizer="sgd", loss=_loss(), jit_compile=False)
    history = trainer.fit(dataset, epochs=2, shuffle=False, verbose=0)
    return recorder, dataset, model, trainer, history, initial


def test_uint8_arrives_in_the_training_step(trained):
    recorder, *_ = trained
    assert recorder.dtypes and set(recorder.dtypes) == {tf.uint8}


def test_draws_differ_per_example_and_per_epoch(trained):
    recorder, *_ = trained
    assert len(recorder.shifts) == 8  # 4 batches of 16 in each of 2 epochs, once per step
    for shift in recorder.shifts:
        assert len(np.unique(shift)) == 16
    first, second = np.concatenate(recorder.shifts[:4]), np.concatenate(recorder.shifts[4:])
    assert first.shape == second.shape == (64,)
    assert np.all(first != second)  # every example, in order, got a new draw in epoch 2


def test_predict_and_evaluate_apply_batch_fn_only(trained):
    recorder, dataset, model, trainer, *_ = trained
    drawn = len(recorder.shifts)
    wrapped = trainer.predict(dataset, verbose=0)
    np.testing.assert_array_equal(trainer.predict(dataset, verbose=0), wrapped)
    np.testing.assert_allclose(wrapped, model.predict(FLOATS, verbose=0), rtol=0, atol=1e-6)
    alone = keras.models.clone_model(model)
    alone.set_weights(model.get_weights())
    alone.compile(loss=_loss())
    plain = alone.evaluate(FLOATS, LABELS, batch_size=16, verbose=0)
    assert trainer.evaluate(dataset, verbose=0) == pytest.approx(plain, rel=1e-6)
    assert len(recorder.shifts) == drawn  # no augmentation outside fit


def test_the_saved_model_is_the_plain_model(trained, tmp_path):
    _, dataset, model, trainer, *_ = trained
    model.save(tmp_path / "model.keras")
    reloaded = keras.models.load_model(tmp_path / "model.keras")
    assert [layer.name for layer in reloaded.layers] == [layer.name for layer in model.layers]
    np.testing.assert_array_equal(
        reloaded.predict(FLOATS, verbose=0), model.predict(FLOATS, verbose=0)
    )
    np.testing.assert_allclose(
        reloaded.predict(FLOATS, verbose=0), trainer.predict(dataset, verbose=0), atol=1e-6
    )


def test_training_moves_the_wrapped_models_weights(trained):
    _, _, model, trainer, history, initial = trained
    assert [v.path for v in trainer.trainable_variables] == [
        v.path for v in model.trainable_variables
    ]
    assert not np.array_equal(model.get_weights()[0], initial[0])
    assert len(history.history["loss"]) == 2


def test_batches_unlike_the_pipelines_are_refused(trained):
    _, _, _, trainer, *_ = trained
    floats = tf.data.Dataset.from_tensor_slices((FLOATS, LABELS)).batch(16)
    with pytest.raises(ValueError) as caught:
        trainer.evaluate(floats, verbose=0)
    assert str(caught.value) == (
        "`data` for evaluation or prediction must be batches like the ones the pipeline built "
        "with augment_on=\"device\" ships (('uint8[None, 6, 6, 3]', 'int64[None]')), since its "
        "device work (batch_fn) runs on them; call the wrapped model for data prepared "
        "otherwise. Received: a batch of ('float32[None, 6, 6, 3]', 'int64[None]')"
    )


def test_bad_arguments_are_refused():
    dataset = build_pipeline(
        (IMAGES, LABELS), batch_fn=_normalise, augment_on="device", batch_size=16
    )
    with pytest.raises(TypeError, match="`model` must be a keras.Model. Received: model=3"):
        DeviceAugmented(3, dataset)
    with pytest.raises(ValueError, match="no work for the training step"):
        DeviceAugmented(_model(), build_pipeline((IMAGES, LABELS), batch_size=16))
