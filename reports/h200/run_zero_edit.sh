#!/bin/bash
# Unmodified training scripts on the H200 (examples/zero_edit/): each run as it is twice (the fresh-process oracle:
# a digest of its final weights), `opbisect trace SCRIPT -- ARGS`, then the script's whole training twice under
# `opbisect run --patch <the trace's sources.csv> SCRIPT -- ARGS` (the fix kept without editing the script).
# Run on the device machine from the project root after `source /root/tfenv.sh`; /root/zero_edit/gpu/, packed into
# $OUT/zero_edit-gpu.tgz after every step; committed as reports/h200/zero_edit/.
set -u
NAME=zero_edit PHASE=gpu
source reports/h200/lib.sh
digest() { grep -hE '^[0-9a-f]{16}$' "$R/$1.txt" | tail -1; }
while read -r ex args; do
  s=examples/zero_edit/$ex.py
  for k in 1 2; do run "$ex-plain$k" 60 python3 "$s" $args; done
  run "$ex" 150 python3 -m opbisect trace "$s" --runs 5 --out "$R" --fingerprint wsum --no-progress -- $args
  if [ -s "$R/$ex/sources.csv" ] && [ "$(wc -l < "$R/$ex/sources.csv")" -gt 1 ]; then
    for k in 1 2; do run "$ex-patched$k" 60 python3 -m opbisect run --patch "$R/$ex/sources.csv" "$s" -- $args; done
  fi
  echo "$ex plain: $(digest "$ex-plain1") $(digest "$ex-plain2") patched: $(digest "$ex-patched1" 2>/dev/null)" \
    "$(digest "$ex-patched2" 2>/dev/null)" | tee -a "$R/oracle.txt"
  pack
done <<'LIST'
keras3_fit --epochs 3
tf_keras_fit 2
custom_loop --epochs 2
custom_train_step
racy_embedding_loop
LIST
