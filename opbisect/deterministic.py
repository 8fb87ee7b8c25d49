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


def deterministic(step_or_model, patch: str | Path | list[str], strict: bool = True):
    """The step with the ops `patch` names replaced (a report's sources.csv or report folder, op types, or op
    names); for a Keras model, the model itself, whose train step is then patched. The result's `replaced`
    and `skipped` say what was done once it has run (or been traced); `lacking`, the named ops a step did not
    have, which are warned of. `strict`: a step with none of the named ops raises UsageError (the patch was made
    for another script); a model's train step traced again after compile() never does."""
    import tensorflow as tf

    from .patches.step import PatchedCallable

    spec = ",".join(patch) if isinstance(patch, (list, tuple)) else str(patch)
    if hasattr(step_or_model, "train_step") and hasattr(step_or_model, "make_train_function"):
        return _keras(step_or_model, spec, strict)
    function = step_or_model
    if not hasattr(function, "get_concrete_function"):
        function = tf.function(function, autograph=False)
    return PatchedCallable(function, spec, getattr(step_or_model, "__name__", "step"), strict)


def _keras(model, spec: str, strict: bool):
    """Point the model's train step at the patched one; Keras rebuilds its train function around it. Each time
    Keras makes its train function anew (`compile()` again: another optimizer, layers frozen or thawed, another
    `jit_compile`), the train step is traced and patched anew, as Keras traces its own again: a patched step
    kept from before would go on training the former variables with the former optimizer."""
    import tensorflow as tf

    original = model.train_step
    model.opbisect_patched = _patched_train_step(model, original, spec, strict)
    # Keras 2 traces its train function with autograph, which would convert opbisect's own code behind the call
    # (and fails on it in TF 2.16): the call is left unconverted; the patched step is traced as it is.
    model.train_step = tf.autograph.experimental.do_not_convert(lambda *args: model.opbisect_patched(*args))
    model.make_train_function = _making_anew(model, original, spec)
    model.train_function = None  # fit, train_on_batch: made again, around the patched step
    return model


def _patched_train_step(model, original, spec: str, strict: bool):
    import tensorflow as tf

    from . import tfcompat
    from .patches.step import PatchedCallable

    step = tf.function(original, autograph=False, jit_compile=tfcompat.keras_jit_compile(model))
    return PatchedCallable(step, spec, type(model).__name__, strict)


def _making_anew(model, original, spec: str):
    """The model's make_train_function, which patches the train step anew where Keras is to make its function
    anew (none yet, or `force`), then has the class's own method (or opbisect run's hook of it) make it. A step
    traced after the first may lack all the patch's ops (another optimizer's scope): a warning, not an error that
    would end the training."""

    def make_train_function(*args, **kwargs):
        if model.train_function is None or kwargs.get("force", args[0] if args else False):
            before = model.opbisect_patched
            model.opbisect_patched = _patched_train_step(model, original, spec, before.strict and not before.used)
        return type(model).make_train_function(model, *args, **kwargs)

    return make_train_function
