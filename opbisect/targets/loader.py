"""Load the target: the user's script and what it defines (the target contract).

`model_step.py` defines `step` (a tf.function, or a plain callable that gets wrapped) and `inputs` (a tuple, or a
zero-argument callable returning one). Optional `variables` lists the state restored before every run. Keras
users may instead define `model` (compiled) and `data` (one `(x, y)` batch): the step is then the model's own
train step, traced with the model's own `jit_compile` setting, as `model.fit` would run it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import tfcompat
from ..errors import CannotTest, TargetError
from . import intercept
from .user_errors import error_summary, user_traceback


@dataclasses.dataclass
class Target:
    path: Path
    step: Any  # a tf.function (tensorflow.python.eager.polymorphic_function.Function)
    make_inputs: Callable[[], tuple]
    variables: list | None  # the user's explicit state list (tf.Variables), or None for "all captured"
    form: str  # "step", "keras" or "fit"
    module: Any
    make_batches: Callable[[], Any] | None = None  # a fresh iterable of argument tuples, one per step
    steps_available: int | None = None  # how many steps `make_batches` yields, when known
    fit: Any = None  # FitPlan for the fit form
    dataset: Any = None  # the tf.data dataset behind the batches, for the pipeline checks
    signature: tuple | None = None  # what the step is traced for (fit: the dataset's specs, a partial last batch too)
    intercepted: Any = None  # targets.intercept.Caught: the training call of an unmodified script it was taken at

    @property
    def name(self) -> str:
        return self.path.stem


def _module_name(path: Path) -> str:
    return "opbisect_target_" + "".join(c if c.isalnum() else "_" for c in Path(path).stem)


@contextlib.contextmanager
def importable(path: Path):
    """While opbisect works on the script: its folder is on sys.path (it may import its neighbours) and its module
    may sit in sys.modules (dataclasses, pickling and autograph look it up). Both are put back afterwards, and so
    are the Keras lines' global dtype policies (a script may set `mixed_float16`) and TensorFlow's global random
    seed (which makes a later script's random ops seeded), so nothing of one script is left behind for the next."""
    name = _module_name(path)
    saved_path, saved_module = list(sys.path), sys.modules.get(name)
    policies, seed = tfcompat.keras_policies(), tfcompat.global_seed()
    sys.path.insert(0, str(Path(path).parent.resolve()))
    try:
        yield
    finally:
        tfcompat.restore_keras_policies(policies)
        tfcompat.restore_global_seed(seed)
        sys.path[:] = saved_path
        if saved_module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved_module


def script_path(script: Path) -> Path:
    """The script's resolved path; a path that cannot be resolved (a symbolic link loop) cannot be tested."""
    try:
        return Path(script).resolve()
    except (RuntimeError, OSError) as exc:
        raise TargetError(f"{script} cannot be loaded ({exc})") from None


def load_module(path: Path, *contexts):
    """The script run as its own module (not __main__), under `contexts`: the target contract's module."""
    from .script import ScriptRunner

    runner = ScriptRunner(path, module_name=_module_name(path))  # kept in sys.modules by importable()
    runner.run(*contexts, during="while loading")
    return runner.loaded


def _public_names(names: dict) -> list[str]:
    return sorted(n for n in names if not n.startswith("_") and not isinstance(names[n], type(sys)))


def _contract_missing(path: Path, names: dict, step_name: str, inputs_name: str) -> str:
    """What a script that defines (`names`) no complete target lacks, and what it defines."""
    found = ", ".join(_public_names(names)) or "nothing"
    if step_name in names:
        return f"{path} defines `{step_name}` but no `{inputs_name}` (the step's arguments, a tuple); found: {found}"
    return (f"{path} defines no `{step_name}`: define `{step_name}` (a tf.function) and `{inputs_name}`, or `model` "
            f"(a compiled keras.Model) and `data`, or run a training script as it is; found: {found}")


def _as_tf_function(fn, name: str, path: Path):
    import tensorflow as tf

    if isinstance(fn, tf.types.experimental.PolymorphicFunction):
        return fn
    if not callable(fn):
        raise TargetError(f"{path}: `{name}` must be a tf.function or a callable, got {type(fn).__name__}")
    return tf.function(fn)


def _inputs_factory(value, name: str, path: Path) -> Callable[[], tuple]:
    def check(result):
        if not isinstance(result, (tuple, list)):
            raise TargetError(
                f"{path}: `{name}` must be a tuple of arguments for the step (or a zero-argument callable "
                f"returning one), got {type(result).__name__}; for a single argument write `({name}_value,)`"
            )
        return tuple(result)

    if callable(value):
        def make():
            try:
                result = value()
            except Exception as exc:  # the user's inputs() raised
                raise TargetError(f"{path}: calling `{name}()` raised {type(exc).__name__}",
                                  user_traceback(exc, path)) from None
            return check(result)
        return make
    fixed = check(value)
    return lambda: fixed


def flatten_variables(value) -> list:
    """tf.Variables and Keras variables from any nesting of lists, dicts, models and optimizers."""
    import tensorflow as tf

    found = []
    for leaf in tf.nest.flatten(value, expand_composites=False):
        if isinstance(leaf, tf.Variable):
            found.append(leaf)
        elif hasattr(leaf, "variables") and not isinstance(leaf, tf.Variable):  # a Keras model or optimizer
            found.extend(flatten_variables(list(leaf.variables)))
        elif isinstance(getattr(leaf, "value", None), tf.Variable):  # a Keras 3 Variable wraps a tf.Variable
            found.append(leaf.value)
        else:
            raise TypeError(type(leaf).__name__)
    return found


def _keras_step(model, batch: tuple, path: Path):
    """The model's own train step as a tf.function, every variable built first (as fit does)."""
    import tensorflow as tf

    strategy = _trainable(model, path)

    def train_step(*data_batch):
        if strategy is None:
            return model.train_step(data_batch)
        # as fit's train function runs it: the train step in every replica, the results reduced
        return tfcompat.reduce_per_replica(strategy.run(model.train_step, args=(data_batch,)), strategy, model)

    try:
        # Build every variable (layers, optimizer slots, compiled metrics) before tracing, as fit does, so the
        # traced step creates none and the snapshot holds all of them.
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            tfcompat.build_keras_model(model, tuple(tf.nest.map_structure(_local, batch)))
    except Exception as exc:
        # A model with its own train_step and no call() (a GAN) cannot be built symbolically, and Keras 2 has no
        # symbolic build: fit then builds the model while tracing its train function. So does opbisect: one
        # trace, which creates the variables with their initial values and runs nothing.
        try:
            tf.function(train_step, autograph=tfcompat.is_legacy_keras(model)).get_concrete_function(*batch)
        except Exception as step_exc:
            raise TargetError(f"{path}: building `model` on `data` raised {error_summary(exc)}; tracing its "
                              f"train_step, as fit builds such a model, raised {error_summary(step_exc)}",
                              user_traceback(step_exc, path)) from None
    return tf.function(train_step, jit_compile=bool(model.jit_compile), reduce_retracing=True)


def _trainable(model, path: Path):
    """The model's tf.distribute strategy (None without one), once it is a compiled Keras model fit can train."""
    if not hasattr(model, "train_step"):
        raise TargetError(f"{path}: `model` must be a keras.Model, got {type(model).__name__}")
    if getattr(model, "optimizer", None) is None:
        raise TargetError(f"{path}: `model` is not compiled: call model.compile(optimizer=..., loss=...) first")
    strategy = tfcompat.model_strategy(model)
    workers = tfcompat.workers_in(strategy)
    if workers > 1:
        keras = tfcompat.keras_of(model)
        raise CannotTest(f"Keras {keras.__version__} cannot train `model` under MultiWorkerMirroredStrategy with "
                         f"{workers} workers: model.fit reduces a per-replica value eagerly before its first step, "
                         f"and its train function reduces each scalar metric along axis 0, both of which raise "
                         f"(tensorflow/tensorflow#72388). opbisect analyses what fit runs, and fit cannot run. "
                         f"Give opbisect a tf.function `step` that calls strategy.run (the step form): --workers "
                         f"runs it in every worker")
    return strategy


def _local(value):
    """A per-replica value's first replica's part (Keras builds a model from one replica's batch)."""
    values = getattr(value, "values", None)
    return values[0] if isinstance(values, tuple) and values else value


def distributed(strategy, batch: tuple) -> tuple:
    """One global batch split across the strategy's replicas, as fit's distributed dataset splits it."""
    import tensorflow as tf

    size = int(tf.shape(tf.nest.flatten(batch)[0])[0])
    dataset = tf.data.Dataset.from_tensor_slices(batch).batch(size)
    return tuple(next(iter(strategy.experimental_distribute_dataset(dataset))))


def _keras_target(module, path: Path) -> tuple[Any, Callable[[], tuple]]:
    import tensorflow as tf

    data = module.data
    if not isinstance(data, (tuple, list)) or len(data) not in (1, 2, 3):
        raise TargetError(f"{path}: `data` must be one batch as an (x,), (x, y) or (x, y, sample_weight) tuple "
                          f"((x,): a model whose train step takes its targets from x)")
    try:
        batch = tuple(tf.nest.map_structure(tf.convert_to_tensor, d) for d in data)  # x may be a dict or a list
    except (ValueError, TypeError) as exc:
        raise TargetError(f"{path}: `data` holds something that is not a tensor ({error_summary(exc)})") from None
    strategy = tfcompat.model_strategy(module.model)
    if strategy is not None:  # the model was made under a tf.distribute strategy: run what fit runs, replicated
        batch = distributed(strategy, batch)
    return _keras_step(module.model, batch, path), (lambda: batch)


@dataclasses.dataclass
class FitPlan:
    """How `model.fit` walks the data: opbisect replays the same batches in the same order."""

    model: Any
    dataset: Any
    epochs: int
    steps_per_epoch: int | None
    kwargs: dict  # what is passed to model.fit
    strategy: Any = None  # the model's tf.distribute strategy: fit splits each batch across its replicas

    def source(self):
        """What fit iterates: the dataset, or under a strategy the dataset split across the replicas."""
        if self.strategy is None:
            return self.dataset
        return self.strategy.experimental_distribute_dataset(self.dataset)

    def batches(self):
        """fit's batch order (Keras 3 keeps one iterator across epochs when steps_per_epoch is set)."""
        source = self.source()
        total = int(self.dataset.cardinality())
        known = total if total >= 0 else None
        iterator, seen = None, 0
        for _ in range(self.epochs):
            per_epoch = self.steps_per_epoch or known
            if iterator is None or self.steps_per_epoch is None:
                iterator, seen = iter(source), 0
            for _ in range(per_epoch if per_epoch else 2**62):
                if known and seen >= known:
                    break
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                seen += 1
                yield tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
            if known and seen >= known:
                iterator, seen = iter(source), 0


def _fit_target(module, path: Path) -> tuple[Any, FitPlan, tuple, int]:
    import tensorflow as tf

    names = vars(module)
    kwargs = dict(names.get("fit_kwargs", {}))
    if "dataset" in names:
        dataset = names["dataset"]
        if not isinstance(dataset, tf.data.Dataset):
            raise TargetError(f"{path}: `dataset` must be a tf.data.Dataset of (x, y) batches")
    elif "x" in names and "y" in names:
        if kwargs.get("shuffle", True):
            raise TargetError(f"{path}: fit shuffles `x`/`y` arrays with its own generator; pass "
                              f"fit_kwargs={{'shuffle': False, ...}} or a tf.data `dataset`")
        dataset = tf.data.Dataset.from_tensor_slices((names["x"], names["y"])).batch(kwargs.get("batch_size", 32))
    else:
        raise TargetError(f"{path}: the fit form needs `dataset` (or `x` and `y`) beside `model` and `fit_kwargs`")
    unknown = set(kwargs) - {"epochs", "steps_per_epoch", "batch_size", "shuffle", "verbose", "callbacks",
                             "class_weight", "initial_epoch"}
    if unknown:
        raise TargetError(f"{path}: fit_kwargs {sorted(unknown)} are not replayed by opbisect; remove them")
    plan = FitPlan(model=module.model, dataset=dataset, epochs=int(kwargs.get("epochs", 1)),
                   steps_per_epoch=kwargs.get("steps_per_epoch"), kwargs=kwargs,
                   strategy=tfcompat.model_strategy(module.model))
    batches = plan.batches()  # one pass over the data: the first batch, and how many steps fit takes
    first = next(batches, None)
    if first is None:
        raise TargetError(f"{path}: `dataset` yields no batch")
    steps = 1 + sum(1 for _ in batches)
    return _keras_step(module.model, first, path), plan, first, steps


def _signature(dataset) -> tuple:
    """The step's arguments as fit traces its train function: the dataset's element specs (a batch dimension of
    None where batches differ in size, as a partial last batch does)."""
    spec = dataset.element_spec
    return tuple(spec) if isinstance(spec, (tuple, list)) else (spec,)


def load_target(script, *contexts, options=None) -> Target:
    """The target of `script`. The script always runs under the intercept's hooks (with `contexts`: the TensorFlow
    setup, seeds pinned), so it is never run to its end before opbisect knows what it is: a training call it makes
    is taken (targets/intercept.py), and a script that makes none is the target contract where the names it defined
    have the contract's types. `options` (a command's settings.StepOptions, and its `steps`): the contract's names,
    the script's arguments, which training call (`at`) and how many steps it takes; by default the contract's
    names, no arguments, the first call, one step. A script whose top level names the contract (read, not run)
    runs as its own module, so its `if __name__ == "__main__"` block stays out, unless `at` asks for a training
    call of it as a script."""
    from .script import MAIN, ScriptRunner

    path = Path(script)
    step_name, inputs_name = getattr(options, "step_name", "step"), getattr(options, "inputs_name", "inputs")
    at = getattr(options, "at", "")
    contract = not at and intercept.defines_contract(path, step_name, inputs_name)
    runner = ScriptRunner(path, getattr(options, "script_args", ()), _module_name(path) if contract else MAIN)
    try:
        caught = intercept.run_to_training(runner, intercept.Point.parse(at), getattr(options, "steps", 1),
                                           *contexts)
    except intercept.NoTrainingCall as exc:
        why = contract_mismatch(exc.names, step_name, inputs_name)
        if why:
            raise TargetError(f"{why}; {exc}") from None
        return _contract_target(path, runner.loaded, step_name, inputs_name)
    return intercepted_target(path, caught)


def contract_mismatch(names: dict, step_name: str, inputs_name: str) -> str:
    """Why the names a script defined are no target contract ("" where they are one): `step` a tf.function or a
    callable beside `inputs`, or `model` a Keras model beside `data` or `fit_kwargs`. A name that has the
    contract's spelling but not its type (a loop counter called `step`) makes no contract."""
    step, model = names.get(step_name), names.get("model")
    if step_name in names and inputs_name in names:  # `inputs` is checked as the contract's (its message says how)
        return "" if callable(step) else f"`{step_name}` is a {type(step).__name__}, not a tf.function or a callable"
    if "model" in names and {"data", "fit_kwargs"} & set(names):
        return "" if hasattr(model, "train_step") else f"`model` is a {type(model).__name__}, not a Keras model"
    return _contract_missing(Path(names.get("__file__", "the script")), names, step_name, inputs_name)


def _contract_target(path: Path, module, step_name: str, inputs_name: str) -> Target:
    names = vars(module)
    if step_name in names:
        step = _as_tf_function(names[step_name], step_name, path)
        if inputs_name not in names:
            raise TargetError(_contract_missing(path, names, step_name, inputs_name))
        make_inputs = _inputs_factory(names[inputs_name], inputs_name, path)
        form = "step"
    elif "model" in names and "fit_kwargs" in names:
        step, plan, first, steps = _fit_target(module, path)
        target = Target(path=path, step=step, make_inputs=lambda: first, variables=None, form="fit",
                        module=module, make_batches=plan.batches, steps_available=steps, fit=plan,
                        dataset=plan.dataset, signature=_signature(plan.source()))
        return _with_variables(target, names, path)
    elif "model" in names and "data" in names:
        step, make_inputs = _keras_target(module, path)
        form = "keras"
    else:
        raise TargetError(_contract_missing(path, names, step_name, inputs_name))
    target = Target(path=path, step=step, make_inputs=make_inputs, variables=None, form=form, module=module)
    if "batches" in names:
        if not callable(names["batches"]):
            raise TargetError(f"{path}: `batches` must be a zero-argument callable returning an iterable of "
                              f"argument tuples (a fresh iterator on every call)")
        target.make_batches = _checked_batches(names["batches"], path)
    if "dataset" in names:
        target.dataset = names["dataset"]
    return _with_variables(target, names, path)


def intercepted_target(path: Path, caught) -> Target:
    """The target of a training call taken from a script run as it is: the model's train step on the batches fit
    would have trained on next, or the custom loop's step on the arguments of its calls."""
    import tensorflow as tf

    if caught.kind == "fit":
        batches = caught.batches
        if not batches:
            raise TargetError(f"{path}: the training call at {caught.where} had no batch to train on")
        step = _keras_step(caught.model, batches[0], path)
    else:
        if any(kwargs for _, kwargs in caught.calls):
            raise TargetError(f"{path}: the step {caught.name!r} at {caught.where} is called with keyword arguments; "
                              f"opbisect takes a step's positional arguments")
        batches = [tuple(args) for args, _ in caught.calls]
        step = caught.function if isinstance(caught.function, tf.types.experimental.PolymorphicFunction) else \
            tf.function(caught.function)
    first = batches[0]
    return Target(path=path, step=step, make_inputs=lambda: first, variables=None,
                  form="keras" if caught.kind == "fit" else "step", module=None,
                  make_batches=lambda: iter(batches), steps_available=len(batches), intercepted=caught)


def _checked_batches(batches, path: Path):
    def make():
        try:
            for item in batches():
                yield tuple(item) if isinstance(item, (tuple, list)) else (item,)
        except TargetError:
            raise
        except Exception as exc:
            raise TargetError(f"{path}: iterating `batches()` raised {type(exc).__name__}",
                              user_traceback(exc, path)) from None
    return make


def _with_variables(target: Target, names: dict, path: Path) -> Target:
    if "variables" in names:
        try:
            target.variables = flatten_variables(names["variables"])
        except TypeError as exc:
            raise TargetError(f"{path}: `variables` must hold tf.Variables, Keras variables or models; "
                              f"found a {exc}") from None
    return target
