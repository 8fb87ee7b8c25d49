#!/bin/bash
# Writes DIR/NAME.py: examples/EXAMPLE.py run after enable_op_determinism() and any extra Python lines given.
#   bash reports/h200/opdet_wrapper.sh EXAMPLE DIR NAME ["python line" ...]   (from the project root)
set -u
example=$1 dir=$2 name=$3; shift 3
mkdir -p "$dir"
{
  printf 'import runpy, sys\nimport tensorflow as tf\nsys.path.insert(0, "%s")\n' "$PWD/examples"
  printf 'tf.config.experimental.enable_op_determinism()\n'
  for line in "$@"; do printf '%s\n' "$line"; done
  printf "globals().update(runpy.run_path('%s'))\n" "$PWD/examples/$example.py"
} > "$dir/$name.py"
