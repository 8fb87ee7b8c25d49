"""Keras 2 (tf_keras) end to end, on the CPU: the step, model/data, fit and dataset forms; its optimizers, legacy
ones too; mixed precision (its LossScaleOptimizer's cond); Embedding, GRU and LSTM, BatchNormalization, Dropout;
steps_per_execution; opbisect.deterministic and verify on a tf_keras model. The models are deterministic on a CPU:
each must trace to exit 0 with no source (and no internal error), unless a planted source says otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import tf_keras

import opbisect
from opbisect.cli import main
from opbisect.ir.graph import OpGraph

from conftest import write_script

HEADER = """
import tf_keras as keras

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
"""

EMBEDDING_SGD_STEP = HEADER + """
model = keras.Sequential([keras.layers.Embedding(100, 8), keras.layers.GlobalAveragePooling1D(),
                          keras.layers.Dense(3)])
model.build((None, 6))
optimizer = keras.optimizers.SGD(0.1)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


inputs = (tf.constant(rng.integers(0, 4, (32, 6)), tf.int32), tf.constant(rng.integers(0, 3, 32), tf.int32))
"""


def test_the_step_form_with_a_keras2_embedding_and_sgd_traces(run_step):
    t = run_step(EMBEDDING_SGD_STEP, runs=3)
    assert t.code == 0 and t.sources == []
    graph = OpGraph.from_json(t.record.graph)
    assert any(graph.op_type(op) == "ResourceGather" for op in graph.ops)


@pytest.mark.parametrize("optimizer", ["keras.optimizers.Adam(1e-3)", "keras.optimizers.legacy.Adam(1e-3)",
                                       "keras.optimizers.legacy.SGD(0.1, momentum=0.9)"])
def test_the_model_data_form_with_dict_inputs_and_sample_weights(run_step, optimizer):
    t = run_step(HEADER + f"""
tokens = keras.Input((6,), name="tokens")  # no Embedding: the legacy optimizers scatter its duplicate rows (a race)
extra = keras.Input((3,), name="extra")
h = keras.layers.BatchNormalization()(keras.layers.Concatenate()([keras.layers.Dense(8)(tokens), extra]))
model = keras.Model({{"tokens": tokens, "extra": extra}}, keras.layers.Dense(2)(keras.layers.Dropout(0.2)(h)))
model.compile(optimizer={optimizer}, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = {{"tokens": rng.standard_normal((16, 6)).astype("float32"),
     "extra": rng.standard_normal((16, 3)).astype("float32")}}
data = (x, rng.integers(0, 2, 16).astype("int32"), rng.random(16).astype("float32"))
""", runs=3)
    assert t.code == 0 and t.sources == [] and t.record.meta.form == "keras"
    assert [d.op_type for d in t.record.seeded] == ["RandomUniform"]  # the dropout, started anew every run


def test_the_fit_form_over_a_dataset_with_steps_per_execution_and_recurrent_layers(run_step):
    # No dropout here: fit's train function then holds one copy of the step per execution, whose seeded ops take
    # other op seeds than the replay's one step (the note on the replay says it leaves other weights).
    t = run_step(HEADER + """
model = keras.Sequential([keras.layers.Embedding(40, 8), keras.layers.GRU(8, return_sequences=True),
                          keras.layers.LSTM(8), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.RMSprop(1e-3), steps_per_execution=2,
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
dataset = tf.data.Dataset.from_tensor_slices((rng.integers(0, 40, (32, 5)).astype("int32"),
                                              rng.integers(0, 2, 32).astype("int32"))).batch(8)
fit_kwargs = {"epochs": 2, "steps_per_epoch": 2}
""", runs=3)
    assert t.code == 0 and t.sources == [] and t.record.meta.form == "fit"
    assert t.record.fit.runs == 3 and t.record.fit.first_differing_step() is None
    assert t.record.facts.fit_replay.mismatch_step is None and t.record.facts.fit_replay.checked_steps == 4


def test_mixed_precision_with_its_loss_scale_optimizer_and_the_policy_put_back(run_step):
    t = run_step(HEADER + """
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2, dtype="float32")])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
data = (rng.standard_normal((16, 8)).astype("float32"), rng.standard_normal((16, 2)).astype("float32"))
""", runs=3)
    assert t.code == 0 and t.sources == []
    graph = OpGraph.from_json(t.record.graph)
    assert any(graph.op_type(op) in ("If", "StatelessIf") for op in graph.ops)
    assert tf_keras.mixed_precision.global_policy().name == "float32"  # the script's policy did not leak


def test_a_planted_source_in_a_keras2_custom_layer_is_named(run_step):
    t = run_step(HEADER + """
class Jitter(keras.layers.Layer):
    def call(self, x):
        noise = tf.numpy_function(lambda: np.float32(np.random.default_rng().random()), [], tf.float32,
                                  name="jitter")
        return x + tf.ensure_shape(noise, [])


model = keras.Sequential([keras.layers.Dense(4), Jitter(), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
data = (rng.standard_normal((8, 3)).astype("float32"), rng.standard_normal((8, 1)).astype("float32"))
""", runs=3, replay=False)
    assert t.code == 1 and t.sources[0].endswith("jitter") and t.row(t.sources[0])["op_type"] == "PyFunc"


def test_deterministic_patches_a_keras2_models_train_step_for_fit(tmp_path):
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Dense(4), tf_keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3)).astype("float32"), rng.standard_normal((16, 1)).astype("float32")
    patched = opbisect.deterministic(model, "BiasAddGrad")
    history = model.fit(x, y, epochs=2, batch_size=8, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2 and np.all(np.isfinite(history.history["loss"]))
    assert len(patched.opbisect_patched.replaced) == 2  # the two Dense layers' bias gradients


def test_verify_on_a_keras2_model(tmp_path):
    script = write_script(tmp_path, "k2", HEADER + """
model = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
data = (rng.standard_normal((16, 4)).astype("float32"), rng.standard_normal((16, 2)).astype("float32"))
""")
    code = main(["verify", str(script), "--patch", "BiasAddGrad", "--runs", "3", "--timing-runs", "5",
                 "--no-switches", "--cpu-reference", "off", "--out", str(tmp_path / "v")])
    assert code == 0
    import json

    got = json.loads((tmp_path / "v" / "k2-verify" / "verification.json").read_text())
    assert len(got["replaced"]) == 2 and got["recommendation"] in ("plain", "patched")
