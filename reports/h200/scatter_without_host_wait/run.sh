#!/bin/bash
# Session 8 on one H200: the scatter patch without the host's wait for the distinct-id count, and verify's CPU
# reference, measured. Run on the device machine from the project root, after `source /root/tfenv.sh`
# (../shared/gpu/README.md). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session8/run.sh sparse   # check_scatter.py, then opbisect verify on the five steps with
#                                              # large-table scatters or sparse sums
#   bash reports/h200/session8/run.sh again    # the large-table steps again (longer limits: the CPU reference),
#                                              # after the scatter patch went back to session 7's form
#   bash reports/h200/session8/run.sh rest     # opbisect verify on the mixed-precision fit and the LM head
# Each verify: --runs 10, the committed CSVs, the switches and the CPU reference in fresh processes. Results in
# /root/session8/<phase>/, packed after every step into $OUT/session8-<phase>.tgz.
set -u
PHASE=${1:-sparse}
R=/root/session8/$PHASE; mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp/out}/session8-$PHASE.tgz" --exclude='*.npz' --exclude='record.json' -C /root/session8 "$PHASE"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; tail -4 "$R/$name.txt"; pack
}
verify() {  # verify EXAMPLE SECONDS [CSV]
  run "$1-verify" "$2" python3 -m opbisect verify "examples/$1.py" --patch "${3:-reports/h200/$1/sources.csv}" \
    --runs 10 --out "$R" --fingerprint wsum
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
if [ "$PHASE" = sparse ]; then
  run check_scatter 120 python3 reports/h200/session8/check_scatter.py
  verify scatter_add_table 110
  verify embedding_table_sgd 110
  verify embedding_sgd 70
  verify grad_accumulation 70
  verify embedding_table_adagrad 140
elif [ "$PHASE" = again ]; then  # after reverting the second stage to session 7's form (see the README)
  verify scatter_add_table 200
  verify embedding_table_sgd 200
  verify lm_head_xent 170 reports/h200/lm_head_xent/sources.csv,reports/h200/patched/lm_head_xent/sources.csv
elif [ "$PHASE" = rest ]; then  # the LM head's CPU reference (a 32k vocabulary on the CPU) needs the longer limit
  verify mixed_precision_fit 150
  verify lm_head_xent 330 reports/h200/lm_head_xent/sources.csv,reports/h200/patched/lm_head_xent/sources.csv
fi
pack
