"""The seed report's own stack on the CPU: Hugging Face TF models (transformers 4.x) under tf_keras, dropout on,
seeds set. Each example, run as a plain script in two fresh processes, prints a digest of its final weights: that
oracle says whether training is reproducible, and `opbisect trace` must agree (on a CPU: exit 0, no source; before
the seeded random ops were started anew every run, BERT's 8 dropouts were named sources and the exit was 1).
Each runs in a child process: the scripts choose Keras 2 through TF_USE_LEGACY_KERAS before TensorFlow starts."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from conftest import EXAMPLES, child_env

pytest.importorskip("transformers")


def _fresh(script) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=child_env(),
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1]


@pytest.mark.parametrize("example", ["hf_bert_fit", "hf_gpt2_lm", "hf_vit_fit"])
def test_opbisect_gives_the_fresh_process_oracles_verdict(tmp_path, example):
    script = EXAMPLES / f"{example}.py"
    reproducible = _fresh(script) == _fresh(script)
    done = subprocess.run([sys.executable, "-m", "opbisect", "trace", str(script), "--runs", "3", "--no-progress",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=child_env(), timeout=1500)
    assert done.returncode == (0 if reproducible else 1), done.stdout[-3000:] + done.stderr[-2000:]
    sources = pd.read_csv(tmp_path / example / "sources.csv")
    assert not any(sources["op_type"].str.startswith("Random"))  # the dropouts are never sources
