"""The record: every fact an `opbisect trace` measured and every decision it made, as plain dataclasses.

This module imports nothing that executes a step (no TensorFlow): a saved record is re-rendered without the
runner. Views (opbisect.report) only read a record; decisions (the verdict, the grappler choice, the observer
effect) are made once, by opbisect.analysis.facts, and stored here with their reasons.

Tensor and op ids are spelled by opbisect.ir.ids.TensorRef.
"""

from __future__ import annotations

import dataclasses

RECORD_VERSION = 9  # 8: the fresh-process check (`fresh`), sources' `detail`; 9: its `script` runs
MISS = 0.05  # every bound on a rate of firing is stated at 95% confidence


def rate_bound(trials: int) -> float:
    """The rate of firing per trial that `trials` trials, none of which fired, rule out at 95%: a difference that
    fired more often would have shown in them (1 - 0.05 ** (1 / trials))."""
    return 1 - MISS ** (1 / max(trials, 1))


@dataclasses.dataclass
class Finding:
    """Something found before or beside the op comparison: `level` is 'error', 'warning' or 'note'."""

    level: str
    message: str


@dataclasses.dataclass
class SeededDraw:
    """A stateful random op with a seed: it draws the same sequence in every fresh process, so each run starts it
    there (`restart`: how), and it is no source. A checkpoint does not hold where its sequence is: training resumed
    from one draws from the sequence's start again."""

    op_name: str
    op_type: str
    site: str  # where the user's code created it ("" where unknown)
    restart: str  # "state variable" (drawn by its tf.random.Generator twin) or "kernel cache" (cleared every run)


@dataclasses.dataclass
class Runs:
    """Fingerprints of the step's flat outputs and of every variable after it, per run."""

    outputs: list[list[int]] = dataclasses.field(default_factory=list)
    after: list[dict[str, int]] = dataclasses.field(default_factory=list)

    def results(self) -> list[tuple]:
        """Each run's result: its outputs and every variable after it, as one comparable value."""
        outputs = self.outputs or [[] for _ in self.after]  # model.fit's runs record no step outputs
        return [(tuple(o), tuple(sorted(a.items()))) for o, a in zip(outputs, self.after)]

    def distinct(self) -> int:
        return len(set(self.results()))

    def deterministic(self) -> bool:
        return self.distinct() <= 1

    def varying_variables(self) -> list[str]:
        keys = sorted(self.after[0]) if self.after else []
        return [k for k in keys if len({a.get(k) for a in self.after}) > 1]


@dataclasses.dataclass
class Trajectory:
    """Per run and per step: fingerprints of the step's arguments, its outputs, and every variable after it."""

    batches: list[list[list[int]]] = dataclasses.field(default_factory=list)  # [run][step]
    outputs: list[list[list[int]]] = dataclasses.field(default_factory=list)
    after: list[list[dict[str, int]]] = dataclasses.field(default_factory=list)
    # model.fit's: the step each entry is after (with steps_per_execution > 1 fit reports once per execution);
    # empty: entry k is after step k
    steps_at: list[int] = dataclasses.field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.after)

    def step_number(self, entry: int) -> int:
        """The step (1-based) that entry `entry` (1-based) is after."""
        return self.steps_at[entry - 1] if self.steps_at else entry

    @property
    def steps(self) -> int:
        return len(self.after[0]) if self.after else 0

    def at(self, step: int) -> Runs:
        """The runs' results after `step` (1-based)."""
        return Runs(outputs=[run[step - 1] for run in self.outputs], after=[run[step - 1] for run in self.after])

    def final(self) -> Runs:
        return self.at(self.steps)

    def first_differing_step(self) -> int | None:
        return next((k for k in range(1, self.steps + 1) if not self.at(k).deterministic()), None)

    def differing_variables(self) -> list[int]:
        """How many variables differ between runs after each step."""
        return [len(self.at(k).varying_variables()) for k in range(1, self.steps + 1)]

    def differing_batches(self) -> list[int]:
        """Steps (1-based) whose arguments differ between runs (re-created iterators, or inputs())."""
        return [k for k in range(1, self.steps + 1) if len({tuple(run[k - 1]) for run in self.batches}) > 1]


@dataclasses.dataclass
class InstrumentedRuns:
    taps: list[str]  # a tap inside a loop or branch body appears once per execution: `region::op:0@k`
    fps: list[list[int | None]] = dataclasses.field(default_factory=list)  # [run][tap]; None: not executed
    before: list[dict[str, int]] = dataclasses.field(default_factory=list)
    after: list[dict[str, int]] = dataclasses.field(default_factory=list)
    outputs: list[list[int]] = dataclasses.field(default_factory=list)
    executions: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # body -> times it ran, per run
    # body -> per execution in run 1: the execution of the enclosing body it ran in (0 at the top level)
    enclosing: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def as_runs(self) -> Runs:
        return Runs(outputs=self.outputs, after=self.after)


@dataclasses.dataclass
class Magnitude:
    max_abs_diff: float
    max_ulp_diff: float
    frac_elements_differing: float
    elements: int


@dataclasses.dataclass
class Replay:
    """A source run alone on its recorded inputs: how many distinct results in how many runs."""

    runs: int  # 0: not replayed (note says why)
    distinct: int
    note: str = ""


@dataclasses.dataclass
class StepAnalysis:
    """The op-level analysis of one step, from the identical state before it."""

    step: int  # 1-based
    instrumented: InstrumentedRuns
    differing: list[str]  # tensor ids whose fingerprint differs between runs
    magnitudes: dict[str, Magnitude]  # op id of a new source -> its magnitude
    magnitude_runs: int
    replays: dict[str, Replay] = dataclasses.field(default_factory=dict)  # op id of a new source -> alone


@dataclasses.dataclass
class Source:
    """One ranked source: a row of the CSV (fields with csv=False stay in the record only)."""

    rank: int
    op_name: str  # the op's id: `region::name` inside a loop or branch body
    op_type: str
    kind: str
    first_step: int
    region: str  # the body holding the op ("" outside any), e.g. `cond/then_branch`, `while/body`
    iteration: int | None  # inside a body: the first execution of its body (0-based) at which it differs
    seen_across: str  # "runs" or "processes"
    runs_differing: int
    runs: int
    distinct_values: int
    downstream_differing: int
    affects_result: bool
    max_abs_diff: float | None
    max_ulp_diff: float | None
    frac_elements_differing: float | None
    source_location: str
    known_remedy: str
    observer_effect: bool  # seen only in the instrumented step: not a finding about the user's step
    replay_distinct: int | None = None  # distinct results of the op run alone on its recorded inputs
    replay_runs: int | None = None  # how many runs alone (None: not replayed; replay_note says why)
    reproducer: str = ""  # the standalone script in the report folder (repro/<rank>_<op_type>.py)
    replica: int | None = None  # under tf.distribute: the replica whose copy of the step the op belongs to
    device: str = ""  # the device the op was placed on in the graph (e.g. GPU:1), when the graph says
    worker: int | None = None  # --workers: the task index of the worker whose step the op belongs to
    detail: str = ""  # kind init: the layer and initializer that made the variable; kind input: what fed the batch
    replay_note: str = dataclasses.field(default="", metadata={"csv": False})
    position: int = dataclasses.field(default=0, metadata={"csv": False})  # in the graph's topological order
    tensors: list[str] = dataclasses.field(default_factory=list, metadata={"csv": False})  # what differed


CSV_COLUMNS = [f.name for f in dataclasses.fields(Source) if f.metadata.get("csv", True)]


@dataclasses.dataclass
class CrossProcess:
    """The comparison of P fresh processes (--processes)."""

    processes: int
    hash_seeds: list[str]
    first_differing_step: int | None  # the first step after which run 1 of the processes differ
    pinned_first_differing_step: int | None  # the same with grappler pinned (None: agree, or not pinned)
    differing_variables: list[int]  # per step: variables whose value differs between processes after it
    compared_steps: int  # op-level comparison ran for steps 1..compared_steps
    reordered: list[str]  # ops that sum the same inputs in another order in another process

    @property
    def differs(self) -> bool:
        return self.first_differing_step is not None


@dataclasses.dataclass
class Made:
    """Where a variable was made: the line of the user's script ("" where none of its frames is the script's) and,
    where a Keras layer made it, the layer and its initializer."""

    site: str
    maker: str = ""


@dataclasses.dataclass
class Probe:
    """What one process of the script saw at its training call: the fresh-process check's data, one probe from this
    process and one from a second fresh one (`trace --probe`), compared by analysis/fresh.py. Digests are of the
    bytes on the host (execute/digest.py): the same in every process, whatever the device."""

    initial: dict[str, str]  # every variable the step captures, at the training call, by key
    batches: list[str]  # per step: its arguments
    after: list[dict[str, str]] = dataclasses.field(default_factory=list)  # per step run: every variable after it
    outputs: list[str] = dataclasses.field(default_factory=list)  # per step run: its outputs
    created: dict[str, Made] = dataclasses.field(default_factory=dict)  # variable key -> where it was made
    pins: list[str] = dataclasses.field(default_factory=list)  # the sources it pinned (ir/randomness.py)
    hash_seed: str = "unset"  # PYTHONHASHSEED in that process
    version: int = 2

    @property
    def steps(self) -> int:
        return len(self.after)


@dataclasses.dataclass
class Cause:
    """The experiment behind a fresh-process difference: pairs of fresh processes, each pair with sources of
    randomness pinned (ir/randomness.py), until a pair agrees."""

    sources: list[str]  # the sources whose pinning made a pair agree, together ([]: no pinning did)
    tried: list[list[str]]  # each set pinned, in order
    agreed: list[bool]  # whether that pair's state and batches agreed

    @property
    def found(self) -> bool:
        return bool(self.sources)


@dataclasses.dataclass
class UserTest:
    """Two fresh runs of the script with the recommendation applied (`opbisect run`), compared after every step."""

    command: str  # the command each ran
    steps: int  # the training steps each ran (calls of the train function or step; 0: to the script's end)
    ran: list[int]  # the steps each run digested
    agreed: bool
    first_apart: int | None = None  # the step after which they differ (0: at the training call)
    apart: list[str] = dataclasses.field(default_factory=list)  # the variables that differ there
    final: list[str] = dataclasses.field(default_factory=list)  # each run's last digest of every variable
    error: str = ""  # a run that failed: why
    calls: list[str] = dataclasses.field(default_factory=list)  # the training steps it ran, as `--at` reaches each
    apart_call: str = ""  # the one in which the runs part ("" where they agree, or for the target contract)

    @property
    def rate_bound(self) -> float | None:
        """Where the runs agreed: the rate per run and step of a variation (a race that fires now and then) that
        their steps rule out. Each step of each run is one trial: a variation in any of them parts the two."""
        return rate_bound(sum(self.ran)) if self.agreed else None

    @property
    def to_the_end(self) -> bool:
        """Whether the script ended before the steps asked for: its two runs were the user's own, whole."""
        return not self.steps or bool(self.ran) and self.ran[0] < self.steps

    def parts_elsewhere(self) -> bool:
        """Whether the runs part in a later training step than the one the fix analysed (its first)."""
        return bool(self.calls and self.apart_call and self.apart_call != self.calls[0])


@dataclasses.dataclass
class FreshCheck:
    """The user's own test, at the training call: this process and a second fresh one, each running the script to
    it, compared on everything the step reads (every variable, the batches) and on the step's results."""

    hash_seed: str  # the user's PYTHONHASHSEED ("unset": each process draws its own)
    init: list[str]  # variables whose value at the training call differs between the processes
    batches: list[int]  # steps (1-based) whose batch differs
    first_differing_step: int | None  # state and batches alike: the first step whose result differs
    steps: int  # the steps compared
    cause: Cause | None = None  # where state or batches differ
    created: dict[str, Made] = dataclasses.field(default_factory=dict)  # a differing variable -> where it was made
    set_sites: list[str] = dataclasses.field(default_factory=list)  # where the script iterates a `set` (file:line)
    error: str = ""  # the second process gave no probe: why (the verdict is this process's alone)
    script: UserTest | None = None  # where the step came out deterministic: two more fresh runs of the script, past
    #                                 the training call analysed (None: not run, or the target contract)

    @property
    def apart(self) -> bool:
        return bool(self.init or self.batches or self.first_differing_step or self.script_apart)

    @property
    def script_apart(self) -> bool:
        """Whether the script's two more runs part (a run that failed tells nothing)."""
        return bool(self.script and not self.script.error and not self.script.agreed)


@dataclasses.dataclass
class Rung:
    """One rung of the replica ladder (--replicas): the experiment in a fresh process, the strategy limited."""

    label: str  # e.g. "1 replica", "all replicas, NCCL_ALGO=Ring"
    limit: int  # the replica limit it ran under (0: the strategy as the script makes it)
    env: dict[str, str]  # what it added to the environment (the NCCL settings)
    replicas: int  # how many replicas the step then had
    nondeterministic: bool  # the uninstrumented step's verdict at this rung
    distinct: int  # distinct results of the uninstrumented step
    runs: int
    rate_bound: float | None  # deterministic rungs: the Verdict's bound on how often a difference could fire
    sources: list[str]  # each source of this rung, `op_name (op_type, kind[, replica k])`, ranked


@dataclasses.dataclass
class Ladder:
    """What changes with the number of replicas (and, on GPUs, with NCCL's algorithm): decided once."""

    rungs: list[Rung]
    # in_replica | needs_replicas | deterministic | unchanged (the rungs ran the same replica count)
    conclusion: str
    reason: str
    nccl: str = ""  # on GPUs: whether the difference follows the NCCL settings ("" where none ran)
    analysed: str = ""  # the label of the rung this record's analysis and sources are from


@dataclasses.dataclass
class Verdict:
    nondeterministic: bool
    exit_code: int  # 0 or 1
    evidence: list[str]  # what was seen, each a short clause: the reason for the verdict
    # deterministic verdicts: the smallest share of runs in which a difference, had it fired that often, would have
    # shown in these identical runs with 95% confidence: 1 - 0.05 ** (1 / runs)
    rate_bound: float | None = None


@dataclasses.dataclass
class GrapplerChoice:
    config: str  # "pinned" (settings.PINNED_GRAPPLER's passes off) or "default" (the user's)
    reason: str
    inconclusive: bool = False  # the passes disagreed in too few runs to say whether grappler is involved


@dataclasses.dataclass
class ObserverEffect:
    """What capture did to the step: the plain and the instrumented step 1 under the analysis configuration."""

    effect: str  # none | changed_result | hid | created | inconclusive | same_variables | moved
    plain_varies: bool
    instrumented_varies: bool
    plain_fired: int = 0  # runs whose result differs from the most common one
    plain_runs: int = 0
    instrumented_fired: int = 0
    instrumented_runs: int = 0


@dataclasses.dataclass
class FitReplay:
    """Whether opbisect's step-by-step replay of model.fit's batches leaves the weights model.fit leaves."""

    checked_steps: int  # 0: both differ from step 1, nothing to compare
    mismatch_step: int | None


@dataclasses.dataclass
class ReplicaDivergence:
    """The copies of a mirrored variable disagree between replicas after a step (tf.distribute keeps them equal:
    an update ran differently, or only, in some replicas)."""

    step: int  # the first step after which they disagree (in any plain run)
    variables: list[str]  # replica 0's key of each mirrored variable whose copies disagree then
    runs: int  # in how many plain runs they disagree after that step


@dataclasses.dataclass
class Facts:
    verdict: Verdict
    grappler: GrapplerChoice
    observer: ObserverEffect
    fit_replay: FitReplay | None = None
    replica_divergence: ReplicaDivergence | None = None


@dataclasses.dataclass
class Meta:
    script: str  # as given on the command line
    script_path: str  # resolved: two scripts with one name never share a report folder
    form: str  # step, keras or fit
    runs: int
    steps: int
    fingerprinter: str
    fingerprint: str
    jit_compile: bool
    ops: int
    variables: int
    restored_variables: int
    seconds: float
    tf_version: str
    keras_version: str
    python: str
    device: str
    cuda: str
    cudnn: str
    gpu_name: str
    op_determinism: bool
    metric_variables: list[str] = dataclasses.field(default_factory=list)
    initial_state: dict[str, int] = dataclasses.field(default_factory=dict)  # as the script created it
    processes: int = 1
    looked_harder: str = ""  # why the passes ran again with --max-runs runs (what the first --runs left open)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per stage, in order
    patched: list[str] = dataclasses.field(default_factory=list)  # `trace --patch`: the ops traced already replaced
    mirrored: list[list[str]] = dataclasses.field(default_factory=list)  # each mirrored variable's copies, by replica
    replicas: int = 1  # under tf.distribute: the replicas the step ran in
    workers: int = 1  # --workers: the MultiWorkerMirroredStrategy workers run together (this record merges them)
    # a script run as it is: the training call taken (kind fit or step, name, where, seconds before it, steps taken)
    intercepted: dict = dataclasses.field(default_factory=dict)
    script_args: list[str] = dataclasses.field(default_factory=list)  # what followed `--`: the script's arguments


# The record's `skipped` counts that compare derives rather than ignores: outputs and post-write states whose inputs
# fix them bit for bit (capture.builder.tappable_tensors), under XLA or outside it.
FUSED_BY_XLA, ELEMENT_WISE = "fused by XLA", "element-wise"
DERIVED = (FUSED_BY_XLA, ELEMENT_WISE)


@dataclasses.dataclass
class Record:
    """Everything an `opbisect trace` measured and decided: the one data file between run and report."""

    meta: Meta
    graph: dict  # the op graph, networkx node-link data (opbisect.ir.graph.OpGraph.to_json)
    findings: list[Finding]
    skipped: dict[str, int]  # outputs not fingerprinted, per dtype, and per DERIVED reason (outputs and states)
    results: list[str]  # the tensors that make up the step's result
    default: Trajectory  # the uninstrumented step, the user's grappler config: the verdict
    pinned: Trajectory | None  # the uninstrumented step, grappler pinned (None with --no-pin-grappler)
    fit: Trajectory | None  # model.fit itself, per batch (the fit form)
    analyses: list[StepAnalysis]
    sources: list[Source]  # ranked
    facts: Facts
    processes: CrossProcess | None = None
    ladder: Ladder | None = None  # --replicas: the rungs and what they show (this record is the full rung's)
    seeded: list[SeededDraw] = dataclasses.field(default_factory=list)  # restarted every run; no checkpoint holds them
    fresh: FreshCheck | None = None  # the fresh-process check (None: not run, e.g. --no-fresh-check, --processes)
    version: int = RECORD_VERSION

    @property
    def runs(self) -> int:
        return self.meta.runs

    @property
    def steps(self) -> int:
        return self.default.steps

    @property
    def stem(self) -> str:
        from pathlib import PurePath

        return PurePath(self.meta.script).stem
