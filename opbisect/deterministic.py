"""`opbisect.deterministic(step_or_model, patch)`: apply a report's patches in training.

    step = opbisect.deterministic(step, "reports/model_step/sources.csv")   # a tf.function: the patched step
    opbisect.deterministic(model, "reports/model_step/sources.csv")         # a Keras model: fit runs patched

The step (or the model's train step) is traced for the arguments of each first call, as tf.function traces it,
and the traced graph gets exactly the chosen ops replaced (opbisect.patches); the variables are the user's own.
For a Keras model the train step is replaced on the model itself, so `fit`, `train_on_batch` and
`steps_per_execution` all run it; under `jit_compile` the patches take their XLA form.
"""

from __future__ import annotations

from pathlib import Path


def deterministic(step_or_model, patch: str | Path | list[str]):
    """The step with the ops `patch` names replaced (a report's sources.csv or report folder, op types, or op
    names); for a Keras model, the model itself, whose train step is then patched. The result's `replaced`
    and `skipped` say what was done once it has run (or been traced)."""
    import tensorflow as tf

    from .patches.step import PatchedCallable

    spec = ",".join(patch) if isinstance(patch, (list, tuple)) else str(patch)
    if hasattr(step_or_model, "train_step") and hasattr(step_or_model, "make_train_function"):
        return _keras(step_or_model, spec)
    function = step_or_model
    if not hasattr(function, "get_concrete_function"):
        function = tf.function(function, autograph=False)
    return PatchedCallable(function, spec, getattr(step_or_model, "__name__", "step"))


def _keras(model, spec: str):
    """Point the model's train step at the patched one; Keras rebuilds its train function around it."""
    import tensorflow as tf

    from . import tfcompat
    from .patches.step import PatchedCallable

    original = model.train_step
    patched = PatchedCallable(tf.function(original, autograph=False, jit_compile=tfcompat.keras_jit_compile(model)),
                              spec,
                       type(model).__name__)
    # Keras 2 traces its train function with autograph, which would convert opbisect's own code behind the call
    # (and fails on it in TF 2.16): the call is left unconverted; the patched step is traced as it is.
    model.train_step = tf.autograph.experimental.do_not_convert(lambda *args: patched(*args))
    model.train_function = None  # fit, train_on_batch: made again, around the patched step
    model.opbisect_patched = patched
    return model
