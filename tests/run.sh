#!/usr/bin/env bash
# The test command (the README's second command; .ci/run runs exactly this): install, lint, the whole suite on the
# newest TensorFlow, then the compatibility subset on TensorFlow 2.16 with tf_keras in a second environment.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -e '.[cpu,test]'
bash tests/chromium.sh
.venv/bin/ruff check .
# The tiers (tests/tiers.py), each timed by pytest on its own line: the fast tier and the end-to-end tests on two
# workers (pytest-xdist, each worker its own TensorFlow: the fast tier 1:46 against 3:25 on one, 2 quiet cores), then
# the live CPU races alone, since a race fires only on the cores it races on.
.venv/bin/python -m pytest -q -n 2 -m "not e2e and not races"
.venv/bin/python -m pytest -q -n 2 -m "e2e and not races"
.venv/bin/python -m pytest -q -m races
bash tests/compat.sh
