#!/usr/bin/env bash
# The compatibility subset on the oldest TensorFlow opbisect supports, 2.16, with tf_keras 2.16 (and Keras 3):
# every target form, the seeded-random rule, planted CPU sources, the exit contract and the hostile-input battery,
# verify, Keras 2 end to end and HF BERT. Its own virtual environment, resolved together with TensorFlow in one pip
# call (TF 2.16 needs numpy < 2). Run from anywhere; .ci/run runs it after the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-tf216
.venv-tf216/bin/pip install -q -e '.[cpu,test]' 'tensorflow==2.16.2' 'tf_keras==2.16.0'
.venv-tf216/bin/python -c "import tensorflow as tf, tf_keras; print('compatibility subset: TF', tf.__version__, 'tf_keras', tf_keras.__version__)"
.venv-tf216/bin/python -m pytest -q -p no:cacheprovider tests/test_seeded.py tests/test_keras2.py tests/test_battery.py \
  tests/test_contract.py tests/test_cli.py tests/test_verify.py tests/test_rounds.py tests/test_zero_edit.py tests/test_hf.py \
  -k "not hf_gpt2_lm and not hf_vit_fit"
