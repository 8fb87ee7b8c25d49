"""Every private TensorFlow/Keras call opbisect makes, in one place: a TensorFlow or Keras upgrade touches this
file. Tested with TensorFlow 2.21 and Keras 3.15. Public APIs are called where they are used.
"""

from __future__ import annotations

import contextlib

from .record.verification import XLA_FLAGS


def op_determinism_enabled() -> bool:
    from tensorflow.python.framework.config import is_op_determinism_enabled

    return bool(is_op_determinism_enabled())


OLDEST_TENSORFLOW = (2, 16)  # Keras 3's and tf_keras's split, which everything here assumes


def too_old(version: str) -> bool:
    """Whether TensorFlow `version` predates what opbisect supports."""
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    return len(parts) == 2 and tuple(parts) < OLDEST_TENSORFLOW


def clear_kernel_cache() -> None:
    """Drop every cached kernel (eager ops and instantiated functions), as tf.random.set_seed does: stateful kernels
    (a seeded random op's generator) are built anew on their next run, and functions are instantiated (grappler
    included) again."""
    from tensorflow.python.eager import context

    context.context().clear_kernel_cache()


def global_seed():
    """TensorFlow's global random seed in this process (None: unset, or TensorFlow not imported yet), set by
    tf.random.set_seed or keras.utils.set_random_seed."""
    import sys

    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.eager import context
    except ImportError:  # a TensorFlow that is not one opbisect supports: it said so already
        return None
    return context.global_seed()


def restore_global_seed(seed) -> None:
    """Put TensorFlow's global seed back to `seed` (what `global_seed` gave), where it changed."""
    if global_seed() != seed:
        import tensorflow as tf

        tf.random.set_seed(seed)


def flat_call_args(concrete, args: tuple) -> list:
    """The arguments flattened the way a ConcreteFunction feeds its placeholders."""
    from tensorflow.python.eager.polymorphic_function import function_type_utils

    bound = function_type_utils.canonicalize_function_inputs(args, {}, concrete.function_type)
    return list(concrete.function_type.unpack_inputs(bound))


def internal_captures(func_graph) -> list:
    """The placeholders inside a FuncGraph that its captured values feed, in the order of the concrete function's
    `captured_inputs`: captured by value, then those fed at call time (MirroredStrategy captures some that way)."""
    import tensorflow as tf

    deferred = tf.nest.flatten(list(func_graph.deferred_internal_captures), expand_composites=True)
    return list(func_graph.internal_captures) + deferred


def function_graph(graph, name: str):
    """The FuncGraph of the function `name` registered in `graph` or a graph enclosing it, or None."""
    while graph is not None:
        fn = getattr(graph, "_functions", {}).get(name)
        if fn is not None:
            return getattr(fn, "graph", None)
        graph = getattr(graph, "outer_graph", None)
    return None


def creation_order(variable) -> int:
    """A number that grows with each variable created in this process (its unique id's counter)."""
    return int(str(variable._unique_id).rpartition("_")[2] or 0)


def jit_compile(function) -> bool | None:
    """A tf.function's jit_compile setting."""
    return getattr(function, "_jit_compile", None)


# Two Keras lines train TensorFlow models: Keras 3 (`keras`) and Keras 2 (`tf_keras`, which `tf.keras` is under
# TF_USE_LEGACY_KERAS=1, and which Hugging Face's TF models use). Every difference between them opbisect meets is here.

def keras_of(model):
    """The Keras package a model (or layer, optimizer) belongs to: `keras` (Keras 3) or `tf_keras` (Keras 2)."""
    import sys

    legacy = sys.modules.get("tf_keras")
    if legacy is not None and isinstance(model, (legacy.Model, legacy.layers.Layer)):
        return legacy
    import keras

    return keras


def function_class():
    """tf.function's class (its __call__ is what every call of a tf.function goes through)."""
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    return polymorphic_function.Function


def keras_lines() -> list:
    """The Keras packages installed here, imported: Keras 3 (`keras`) and Keras 2 (`tf_keras`), either may be
    missing. Importing tf_keras does not make tf.keras Keras 2: TF_USE_LEGACY_KERAS, read when tf.keras is first
    touched, decides that."""
    import importlib

    found = []
    for name in ("keras", "tf_keras"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


def is_legacy_keras(model) -> bool:
    return keras_of(model).__name__ == "tf_keras"


def build_keras_model(model, batch: tuple) -> None:
    """Build every variable of a compiled Keras 3 model (layers, optimizer slots, metrics), as fit does first.
    Keras 2 has no such build: fit makes its variables while tracing its train function (the caller does that)."""
    if is_legacy_keras(model):
        raise NotImplementedError("Keras 2 builds a model's variables while tracing its train step")
    model._symbolic_build(data_batch=batch)


def keras_policies() -> list:
    """(Keras package, its global dtype policy) of each Keras line imported in this process (a script may set
    `mixed_float16`): what `restore_keras_policies` puts back."""
    import sys

    return [(k, k.mixed_precision.global_policy()) for k in (sys.modules.get("keras"), sys.modules.get("tf_keras"))
            if k is not None and hasattr(k, "mixed_precision")]


def restore_keras_policies(saved: list) -> None:
    """Put back the policies `keras_policies` saved; a Keras line imported since gets its default (floatx)."""
    import sys

    kept = {k.__name__: policy for k, policy in saved}
    for k in (sys.modules.get("keras"), sys.modules.get("tf_keras")):
        if k is not None and hasattr(k, "mixed_precision"):
            k.mixed_precision.set_global_policy(kept.get(k.__name__) or k.backend.floatx())


def keras_variable_handles(variables) -> set:
    """ids of the resource handles of Keras variables (a Keras 3 Variable wraps a tf.Variable as `.value`; Keras 2's
    are tf.Variables, whose `value` is a method)."""
    import tensorflow as tf

    return {id(v.handle if isinstance(v, tf.Variable) else v.value.handle) for v in variables}


def dataset_graph_def(dataset):
    """The GraphDef of a tf.data pipeline."""
    from tensorflow.core.framework import graph_pb2

    return graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())


@contextlib.contextmanager
def grappler_options(options: dict | None):
    """Run under these grappler options, then put back exactly the options set before (set_experimental_options
    only adds keys: a key that was unset must become unset again, not True).

    `memory_optimization` is not one of set_experimental_options' keys (it ignores unknown keys without a word):
    False sets the memory optimizer off in the config every tf.function call carries."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.eager import context

    if not options:
        yield
        return
    options = dict(options)
    memory = options.pop("memory_optimization", None)
    rounds = options.pop("meta_optimizer_iterations", None)
    ctx = context.context()
    previous = dict(ctx._optimizer_experimental_options)
    previous_call = ctx._thread_local_data.function_call_options  # an enclosing grappler_options' own
    tf.config.optimizer.set_experimental_options(options)
    if memory is not None or rounds is not None:
        call = ctx.function_call_options  # built from the options just set
        proto = config_pb2.ConfigProto.FromString(call.config_proto_serialized)
        levels = rewriter_config_pb2.RewriterConfig
        rewrite = proto.graph_options.rewrite_options
        if memory is not None:
            rewrite.memory_optimization = levels.DEFAULT_MEM_OPT if memory else levels.NO_MEM_OPT
        if rounds is not None:
            rewrite.meta_optimizer_iterations = levels.ONE if rounds == 1 else levels.TWO
        call.config_proto_serialized = proto
    try:
        yield
    finally:
        ctx._optimizer_experimental_options = previous
        ctx._thread_local_data.function_call_options = previous_call  # None: rebuilt from the options, as TF does


def op_def(op_type: str):
    """The registered OpDef of an op type (its argument names and attributes), or None."""
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op_type)


def register_function_def(fdef) -> None:
    """Make a FunctionDef callable from any function this process runs. A function's library is gathered from the
    Python functions its graph holds, not from FunctionDefs imported into it with a GraphDef: an imported body
    that is not registered here is missing where the loop is lowered (TensorFlow crashes there)."""
    from tensorflow.python.eager import context

    ctx = context.context()
    if not ctx.has_function(fdef.signature.name):
        ctx.add_function_def(fdef)


def traced_functions(source) -> dict:
    """{name: function} of the functions the FuncGraph `source` holds (loop and branch bodies, conditions) with
    their traced graphs: a trace enters a body through those (`function_graph`). A FunctionDef imported with a
    GraphDef has none, and replaces the one of its name in the importing graph: leave those out of the import."""
    return dict(getattr(source, "_functions", {}))


def add_functions(graph, functions) -> None:
    for f in functions:
        graph._add_function_recursive(f)  # skips a name the graph has


def xla_sort(x):
    """XLA's own Sort of a vector, ascending, with a plain comparison (only inside an XLA cluster)."""
    from tensorflow.compiler.tf2xla.python import xla

    return xla.sort(x)


def pack_outputs(concrete, flat: list):
    """A concrete function's flat output tensors packed as the function returns them (dicts, tuples, Nones)."""
    return concrete.function_type.pack_output(list(flat))


def keras_jit_compile(model) -> bool:
    """Whether Keras compiles a model's train step with XLA (its `jit_compile`, "auto" resolved)."""
    return bool(getattr(model, "jit_compile", False))


def reduce_per_replica(values, strategy, model):
    """What Keras' train function returns from a replicated train step: the per-replica values reduced as fit
    reduces them (its "auto" reduction in Keras 3, the first replica's in Keras 2)."""
    if is_legacy_keras(model):
        from tf_keras.src.engine.training import reduce_per_replica as legacy_reduce

        return legacy_reduce(values, strategy, reduction="auto")
    from keras.src.backend.tensorflow.trainer import reduce_per_replica as keras_reduce

    return keras_reduce(values, strategy, reduction="auto")


def mirrored_copies() -> list[list]:
    """The per-replica copies of each live tf.distribute MirroredVariable (synchronised on write), in replica
    order. A copy does not point back at its container, so the containers are found among the live objects;
    SyncOnRead variables (Keras metrics) are left out: their copies differ by design."""
    import gc

    from tensorflow.python.distribute import values as distribute_values

    return [list(o.values) for o in gc.get_objects() if isinstance(o, distribute_values.MirroredVariable)]


def variables_of_handles(handle_ids: set) -> dict:
    """{id(handle): variable} for the live resource variables whose handle tensor is one of `handle_ids`. A step
    that reads a variable's `.handle` directly (tf_keras's legacy optimizers apply their updates so) does not list
    it among its graph's variables; the variable is found among the live objects."""
    import gc

    from tensorflow.python.ops import resource_variable_ops

    found = {}
    for o in gc.get_objects():
        if isinstance(o, resource_variable_ops.BaseResourceVariable):
            handle = getattr(o, "_handle", None)
            if handle is not None and id(handle) in handle_ids:
                found[id(handle)] = o
    return found


def per_replica_variables(variables) -> list:
    """`variables` with each tf.distribute variable replaced by its per-replica copies (plain ResourceVariables), each
    once: a step under a strategy captures one copy's handle per replica, while FuncGraph.variables may list the
    distributed variable whole (a tf.random.Generator's state made under MirroredStrategy)."""
    import tensorflow as tf

    out, seen = [], set()
    for v in variables:
        for copy in (v.values if isinstance(v, tf.distribute.DistributedValues) else (v,)):
            if id(copy) not in seen:
                seen.add(id(copy))
                out.append(copy)
    return out


def model_strategy(model):
    """The tf.distribute strategy a Keras model was created under, or None for the default (no strategy)."""
    import tensorflow as tf

    strategy = getattr(model, "distribute_strategy", None)
    if strategy is None or strategy is tf.distribute.get_strategy():
        return None
    return strategy


def workers_in(strategy) -> int:
    """How many workers a MultiWorkerMirroredStrategy spans (1 for any other strategy, or one worker)."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    return strategy.extended._num_workers if strategy.extended._in_multi_worker_mode() else 1


def limit_mirrored_strategies(replicas: int) -> None:
    """From now on, every MirroredStrategy this process makes runs on at most its first `replicas` devices, however
    the script names them (a list, or none: every GPU). The limit sits on the strategy's own device set-up, which
    every way of making one passes through, so no import alias of the user's can miss it. 0: no limit (the script
    as written: every process but a rung of --replicas)."""
    if not replicas:
        return
    from tensorflow.python.distribute import mirrored_strategy

    extended = mirrored_strategy.MirroredExtended
    original = extended._initialize_strategy

    def first_devices(self, devices):
        return original(self, tuple(devices)[:replicas])

    extended._initialize_strategy = first_devices


def call_flat(concrete, flat: list):
    """Call a concrete function on its flat tensor arguments, skipping the structured binding and type checks of
    each argument: for a restore of 2400 variables, 12 ms a call instead of 100 ms."""
    return concrete._call_flat(flat, concrete.captured_inputs)


def read_now(v):
    """A variable's value read eagerly by one raw op (cheaper than `read_value()`). A plain variable: trace maps a
    distributed one to its per-replica copies (`per_replica_variables`)."""
    import tensorflow as tf

    return tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=v.dtype)


def assign_now(v, value) -> None:
    """Write a (plain) variable eagerly by one raw op."""
    import tensorflow as tf

    tf.raw_ops.AssignVariableOp(resource=v.handle, value=value)


# XLA's GPU compiler builds a jit-compiled step's kernels on one thread unless these flags say otherwise (TensorFlow
# hands it no thread pool). The instrumented copy of an XLA step digests its tapped tensors, so XLA builds many more
# kernels than for the plain step, which fuses them into few. XLA aborts on a flag it does not know: set only on the
# TensorFlow versions they were checked on.
XLA_PARALLEL_FLAGS = ("--xla_gpu_force_compilation_parallelism", "--xla_gpu_enable_llvm_module_compilation_parallelism")
XLA_FLAGS_CHECKED_ON = ("2.21.",)


def parallel_xla_compilation(environ, tf_version: str | None) -> None:
    """Before XLA first compiles (it reads XLA_FLAGS then): let its GPU compiler use every core (the same kernels,
    built side by side), unless XLA_FLAGS already sets either flag or this TensorFlow (`tf_version`) was not
    checked. The report's environment note shows XLA_FLAGS for a step that compiles with XLA."""
    import os

    flags = environ.get(XLA_FLAGS, "")
    if any(name in flags for name in XLA_PARALLEL_FLAGS) or not (tf_version or "").startswith(XLA_FLAGS_CHECKED_ON):
        return
    threads, split = XLA_PARALLEL_FLAGS
    environ[XLA_FLAGS] = f"{flags} {threads}={os.cpu_count() or 1} {split}=true".strip()


def with_xla_flags(base, env: dict) -> dict:
    """`base` (an environment) updated with `env`, where XLA_FLAGS in both is joined rather than replaced: the
    user's own XLA flags stay, and XLA takes the last of a flag given twice."""
    merged = {**base, **env}
    if base.get(XLA_FLAGS) and env.get(XLA_FLAGS):
        merged[XLA_FLAGS] = f"{base[XLA_FLAGS]} {env[XLA_FLAGS]}"
    return merged


def installed_tensorflow() -> str | None:
    """The installed TensorFlow's version, read without importing it (None: not installed under a known name)."""
    from importlib import metadata

    for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(name)
    return None


def weight_maker(frames) -> str:
    """The Keras layer, and its initializer or seed generator, that make a variable, read off the frames of its
    creation (innermost first): Layer.add_weight (both Keras lines) holds the initializer; a Keras 3 SeedGenerator
    makes its state itself; the layer is the innermost frame's `self` that is one. "" where no layer made it."""
    made, layer = "", ""
    for frame in frames:
        me = frame.f_locals.get("self")
        if not made and frame.f_code.co_name == "add_weight" and "initializer" in frame.f_locals:
            init = frame.f_locals["initializer"]
            made = "" if init is None else f"initializer {init if isinstance(init, str) else type(init).__name__}"
        elif not made and type(me).__name__ == "SeedGenerator":
            made = "its seed generator"
        if not layer and hasattr(me, "add_weight") and isinstance(getattr(me, "name", None), str):
            layer = me.name
    return ", ".join(p for p in (f"layer {layer}" if layer else "", made) if p)


@contextlib.contextmanager
def variable_creator(creator):
    """Within: every tf.Variable made in this thread goes through `creator(next_creator, **kwargs)`."""
    import tensorflow as tf

    with tf.variable_creator_scope(creator):
        yield
