"""One settings dataclass for a whole `opbisect trace` (as torch.fx's net_min_base does)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

# Grappler passes whose decisions move when capture taps are added (measured: 1-ulp shifts of the final
# weights until both were off for the plain and the instrumented step).
PINNED_GRAPPLER = {"constant_folding": False, "arithmetic_optimization": False}
DEVICES = ("auto", "cpu", "gpu")
FINGERPRINTS = ("auto", "farmhash", "wsum", "fused")


@dataclasses.dataclass
class TraceSettings:
    script: Path
    runs: int = 5
    out: Path = Path("reports")
    step_name: str = "step"
    inputs_name: str = "inputs"
    device: str = "auto"  # auto | cpu | gpu
    pin_grappler: bool = True
    magnitude_runs: int = 0  # 0: as many as `runs`
    progress: bool = True
    fingerprint: str = "auto"  # auto | farmhash | wsum | fused
    steps: int = 1  # consecutive steps per run (step bisection)
    processes: int = 1  # fresh Python processes (cross-process runs)

    def validate(self) -> None:
        from .errors import UsageError

        if self.runs < 2:
            raise UsageError(f"--runs must be at least 2 to compare runs (got {self.runs})")
        if self.device not in DEVICES:
            raise UsageError(f"--device must be auto, cpu or gpu (got {self.device!r})")
        if self.steps < 1:
            raise UsageError(f"--steps must be at least 1 (got {self.steps})")
        if self.processes < 1:
            raise UsageError(f"--processes must be at least 1 (got {self.processes})")
        if self.fingerprint not in FINGERPRINTS:
            raise UsageError(f"--fingerprint must be auto, farmhash, wsum or fused (got {self.fingerprint!r})")
