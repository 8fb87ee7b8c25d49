"""report.json: the verdict, the decisions and the ranked sources, for scripts (the record itself is larger)."""

from __future__ import annotations

import dataclasses
import json

from ..record.model import Record
from ..record.store import SUMMARY_JSON, json_number


def summary(record: Record) -> dict:
    sources = [{k: json_number(v) if isinstance(v, float) else v for k, v in dataclasses.asdict(s).items()}
               for s in record.sources]
    return {
        "script": record.meta.script, "script_path": record.meta.script_path, "form": record.meta.form,
        "device": record.meta.device, "runs": record.runs, "steps": record.steps,
        "replicas": record.meta.replicas, "workers": record.meta.workers, "patched": record.meta.patched,
        "verdict": dataclasses.asdict(record.facts.verdict),
        "grappler": dataclasses.asdict(record.facts.grappler),
        "observer": dataclasses.asdict(record.facts.observer),
        "findings": [dataclasses.asdict(f) for f in record.findings],
        "replica_divergence": (dataclasses.asdict(record.facts.replica_divergence)
                               if record.facts.replica_divergence else None),
        "processes": dataclasses.asdict(record.processes) if record.processes else None,
        "ladder": dataclasses.asdict(record.ladder) if record.ladder else None,
        "fresh": dataclasses.asdict(record.fresh) if record.fresh else None,  # and the script's runs: its `script`
        "sources": sources,
        "seeded": [dataclasses.asdict(d) for d in record.seeded],
    }


class JsonReporter:
    filename = SUMMARY_JSON

    def render(self, record: Record) -> str:
        return json.dumps(summary(record), indent=1, allow_nan=False)
