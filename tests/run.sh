#!/usr/bin/env bash
# The test command (the README's second command; .ci/run runs exactly this): install, lint, the whole suite on the
# newest TensorFlow, then the compatibility subset on TensorFlow 2.16 with tf_keras in a second environment.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -e '.[cpu,test]'
bash tests/chromium.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q
bash tests/compat.sh
