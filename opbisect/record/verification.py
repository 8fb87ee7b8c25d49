"""The record of `opbisect verify`: each variant of the step run side by side from one state, and the decision.

Variants: `plain` (the step as written), `patched` (the report's sources replaced, opbisect.patches), `global
switch` (enable_op_determinism, in a child process since it is process-wide), and each TensorFlow family switch
that applies to the sources (an environment variable, in a child process); where XLA compiles the step on a GPU,
the patched step under each of XLA's switches for what it compiles (XLA_FLAGS, in a child process); and the plain
step on the CPU, the numerical reference (in a child process). The recommendation, the cheapest
variant whose runs all gave the same bits, is decided once (`decide`) and stored. A variant whose convolutions'
cuDNN algorithms are autotuned (`autotuned`) gave the same bits within its own process only: TensorFlow picks the
fastest algorithm it times in each process, of the deterministic ones under TF_CUDNN_DETERMINISTIC, and takes the
first that works only under op determinism, so another process may pick others. Such a variant is recommended
only where no variant without autotuning was reproducible.
"""

from __future__ import annotations

import dataclasses

from ..errors import EXIT_CLEAN, EXIT_FOUND

VERIFY_VERSION = 6  # 2: each variant's timed steps and its ratio's interval; 3: `autotuned`, `steps`;
# 4: each variant's configuration as data (`patched`, `switches`, `global_switch`); 5: `env` (XLA's own switch),
# `unlike_plain`; 6: `confirm_runs` (a variant's runs can outnumber `runs`)
PLAIN, PATCHED, GLOBAL, CPU_REFERENCE = "plain", "patched", "global switch", "cpu reference"

# XLA's switches for the ops it compiles, each tried by verify under the patch where XLA compiles the step on a GPU
# (XLA_FLAGS), narrowest first. Its fusion autotuner off: fusions keep XLA's default tiling, where it would time
# candidates and keep the fastest (on an H100 the patched BERT-base mixed step gave 2 results in 10 without it and one
# with it, twice, at the patch's own 1.07x: reports/h100/shapes/README.md#lease19; on another H100, 2 in 10 with it,
# and fresh runs parted about once in 70 steps: #lease24). With Triton's GEMMs off as well: every GEMM goes to cuBLAS,
# none to a Triton kernel whose form XLA's autotuner picks (that step: one result in 200 runs and four fresh runs
# alike through 100 steps, 1.06x the plain step under the same flags: #lease25). Its autotuning off: its default
# kernels everywhere (cuBLAS' algorithms too), at 7x there. Its own deterministic ops (its docs/determinism.md):
# scatters, GEMMs (cuBLAS without atomics), convolutions and attention in deterministic forms, and compilation refused
# on select-and-scatter, which has none; a float scatter whose indices XLA cannot prove unique becomes a loop (35x).
# TensorFlow's global switch sets XLA's wider `--xla_gpu_deterministic_ops` with every TensorFlow op's own.
XLA_FLAGS = "XLA_FLAGS"  # where the switches go: after the user's own flags, never in their place (XLA takes the
# last of a flag given twice): in verify's children and the user's test (tfcompat.with_xla_flags), the printed
# command (record/fixing.run_command) and the lines to keep (fix/plan.keep_lines)
XLA_NO_FUSION_AUTOTUNING = "--xla_gpu_experimental_enable_fusion_autotuner=false"
XLA_NO_TRITON_GEMM = f"{XLA_NO_FUSION_AUTOTUNING} --xla_gpu_enable_triton_gemm=false"
XLA_NO_AUTOTUNING = "--xla_gpu_autotune_level=0"
XLA_DETERMINISTIC_OPS = "--xla_gpu_exclude_nondeterministic_ops=true"
# each switch: what it does, and what still varied where the patched step varies and it does not
XLA_SWITCHES = {
    XLA_NO_FUSION_AUTOTUNING: ("XLA's fusion autotuner off",
                               "a fusion's form XLA's fusion autotuner picks (by timing, in each process)"),
    XLA_NO_TRITON_GEMM: ("XLA's fusion autotuner and Triton GEMMs off",
                         "a GEMM XLA writes as a Triton kernel, in the form its autotuner picks (by timing)"),
    XLA_NO_AUTOTUNING: ("XLA's autotuning off", "a kernel XLA's autotuner picks (by timing, in each process)"),
    XLA_DETERMINISTIC_OPS: ("XLA's own deterministic ops",
                            "an op XLA compiles in a form that varies (a scatter, a GEMM with atomics, ...)"),
}


@dataclasses.dataclass
class Variant:
    name: str
    how: str  # one line: what runs
    runs: int = 0
    distinct: int = 0  # distinct results: the step's outputs and every variable after it
    step_ms: float | None = None  # median wall time of one step (synchronised), warm-up excluded
    timed: int = 0  # the steps step_ms is the median of
    ratio: float | None = None  # step_ms / the plain step's
    ratio_low: float | None = None  # the ratio's 95% bootstrap interval over the timed steps (None: too few)
    ratio_high: float | None = None
    max_abs_diff: float | None = None  # against the plain step's first run, over outputs and variables
    max_ulp: int | None = None
    # against the plain step run on the CPU (the `cpu reference` variant), where it ran and could be compared
    cpu_abs_diff: float | None = None
    cpu_ulp: int | None = None
    reference: bool = False  # the CPU reference itself: a yardstick, never recommended
    comparable: bool = True  # False: started from other values (another process, unseeded inputs)
    error: str = ""  # why it did not run (e.g. an op with no deterministic kernel raised under the switch)
    autotuned: bool = False  # its GPU convolutions' algorithms are picked by timing in each process
    # what the variant is, as data (its name says it in words): opbisect's patch applied, the environment variables
    # set to 1 before TensorFlow starts (family switches), TensorFlow's global switch (enable_op_determinism)
    patched: bool = False
    switches: list[str] = dataclasses.field(default_factory=list)
    global_switch: bool = False
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # other environment it sets (XLA_FLAGS)
    # variables one of its step and the plain step updated and the other left as they were (a skipped update: under
    # mixed precision the loss scale found a non-finite gradient): then its time is not the same step's
    unlike_plain: list[str] = dataclasses.field(default_factory=list)

    @property
    def reproducible(self) -> bool:
        return not self.error and self.runs >= 2 and self.distinct == 1


@dataclasses.dataclass
class Verification:
    script: str
    script_path: str
    device: str
    patch: str  # the --patch spec
    runs: int
    replaced: list[str]  # op ids replaced in the patched variant
    skipped: dict[str, str]  # op id -> why it was not replaced
    renamed: dict[str, str]  # op id as named -> the op it is in this step (scopes renumbered by Keras)
    not_ops: dict[str, str]  # CSV sources no replacement fixes -> their kind
    plain_spread: float | None  # the plain step's own run-to-run max abs difference
    variants: list[Variant]
    recommendation: str = ""  # the cheapest reproducible variant's name ("" when none is)
    timing_runs: int = 0  # steps of each variant timed after its runs (0: the runs were timed)
    steps: int = 1  # consecutive steps per run, from the data's first batch (times are per step)
    confirm_runs: int = 0  # a variant alike in its `runs` ran on to this many in all (0: none did)
    version: int = VERIFY_VERSION

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    def patched(self) -> list[Variant]:
        """The patched step's variants: alone, and under the family switches its rewrite-less ops need."""
        return [v for v in self.variants if v.name == PATCHED or v.name.startswith(PATCHED + " + ")]

    @property
    def fixed_by(self) -> str:
        """The cheapest patched variant that was bitwise reproducible ("" when none was)."""
        good = [v for v in self.patched() if v.reproducible]
        return decide(good)

    @property
    def untold(self) -> list[str]:
        """The other bitwise reproducible variants whose ratio's interval overlaps the recommended one's: these
        timings do not say which is cheaper."""
        best = self.variant(self.recommendation)
        if best is None or best.ratio_low is None:
            return []
        return [v.name for v in self.variants if v is not best and v.reproducible and not v.reference
                and v.autotuned == best.autotuned
                and v.ratio_low is not None and v.ratio_low <= best.ratio_high and best.ratio_low <= v.ratio_high]

    @property
    def in_one_process(self) -> list[str]:
        """The bitwise reproducible variants passed over for the recommendation because their convolutions are
        autotuned: reproducible in this process, not shown to be in another."""
        best = self.variant(self.recommendation)
        if best is None or best.autotuned:
            return []
        return [v.name for v in self.variants if v.reproducible and v.autotuned and not v.reference]

    @property
    def exit_code(self) -> int:
        """0 only when the patched step (under the family switches its unpatchable ops need) is bitwise
        reproducible (git bisect: good), else 1."""
        return EXIT_CLEAN if self.fixed_by else EXIT_FOUND


def ranked(variants: list[Variant]) -> list[Variant]:
    """The variants whose runs were bitwise identical, cheapest first, those whose convolutions are autotuned after
    the others; a variant without a time ranks last. What fix tries in turn, until two fresh runs agree."""
    good = [v for v in variants if v.reproducible and not v.reference]
    return sorted(good, key=lambda v: (v.autotuned, v.step_ms is None, v.step_ms or 0.0, v.name != PATCHED))


def decide(variants: list[Variant]) -> str:
    """The recommended variant's name: the first `ranked` ("" when none was reproducible)."""
    good = ranked(variants)
    return good[0].name if good else ""
