#!/bin/bash
# The cross-process mode on the H200: `opbisect trace --processes 2` on the Conv2D step, with and without op
# determinism (cuDNN autotuning picks algorithms once per process). Run from the project root after
# `source /root/tfenv.sh`; run_examples.sh calls it last. Writes $OUT/h200/processes/: a report folder and the terminal output (.txt) per step.
set -u
R=${OUT:-/tmp/out}/h200/processes; mkdir -p "$R"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache} PYTHONUNBUFFERED=1
W=${W:-/tmp/opbisect_wrappers}
bash reports/h200/opdet_wrapper.sh conv2d_net "$W" conv2d_net_opdet
for name in conv2d_net conv2d_net_opdet; do
  script=examples/$name.py; [ "$name" = conv2d_net_opdet ] && script=$W/$name.py
  start=$(date +%s)
  timeout 240 python3 -m opbisect trace "$script" --runs 3 --processes 2 --out "$R" --no-progress \
    --fingerprint ${FP:-auto} > "$R/$name.txt" 2>&1
  echo "$name --processes 2 exit=$? seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"
done
