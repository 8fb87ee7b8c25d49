#!/bin/bash
# The seed report's stack on one H200: Hugging Face TF models (transformers 4.46.3) under tf_keras, dropout on, seeds
# set. Run on the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md,
# with EXTRA_WHEELS for tf_keras, transformers, tokenizers, huggingface_hub, pydantic). One phase per call:
#   bash reports/h200/run_hf.sh oracle EXAMPLE   # the example as a plain script, twice, and twice under op
#                                                # determinism: the fresh-process oracle (weights' digests)
#   bash reports/h200/run_hf.sh trace EXAMPLE    # trace --runs 5, then trace --patch <every earlier round's CSV>
#                                                # while a round finds sources (at most 3 rounds); reproducers
#   bash reports/h200/run_hf.sh verify EXAMPLE   # verify --patch <every round's CSV>, 10 runs per variant
# Everything lands in /root/hf/EXAMPLE/, packed into $OUT/hf-EXAMPLE.tgz after every step.
set -u
STEP=$1 EX=$2
R=/root/hf/$EX; mkdir -p "$R"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 TF_FORCE_GPU_ALLOW_GROWTH=true
pack() { tar czf "${OUT:-/tmp/out}/hf-$EX.tgz" --exclude='*.npz' --exclude='record.json' -C /root/hf "$EX"; }
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; tail -3 "$R/$name.txt"; pack
}
csvs() { ls "$R"/round*/"$EX"/sources.csv 2>/dev/null | paste -sd, -; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
if [ "$STEP" = oracle ]; then
  printf 'import runpy, tensorflow as tf\ntf.config.experimental.enable_op_determinism()\nrunpy.run_path("%s", run_name="__main__")\n' \
    "examples/$EX.py" > /tmp/opdet.py
  for k in 1 2; do run "plain$k" 200 python3 "examples/$EX.py"; done
  for k in 1 2; do run "opdet$k" 200 python3 /tmp/opdet.py; done
  grep -h . "$R"/plain?.txt "$R"/opdet?.txt | grep -E '^[0-9a-f]{16}$' | paste -sd' ' | tee "$R/oracle.txt"
elif [ "$STEP" = trace ]; then
  start=$(date +%s)
  for k in 1 2 3; do
    [ $(( $(date +%s) - start )) -lt 300 ] || break
    patch=$(csvs); mkdir -p "$R/round$k"
    run "round$k" 280 python3 -m opbisect trace "examples/$EX.py" --runs 5 --out "$R/round$k" --no-progress \
      ${patch:+--patch "$patch"}
    ls "$R/round$k/$EX"/repro/*.py 2>/dev/null | xargs -r -P 8 -I{} bash -c \
      'out=$(timeout 120 python3 "{}" 2>&1); echo "{} exit=$?: $(echo "$out" | tail -1)"' \
      | sed "s|$R/||" | tee -a "$R/reproducers.txt"
    grep -q "^round$k exit=1 " "$R/exits.txt" || break
  done
elif [ "$STEP" = verify ]; then
  run verify "${LIMIT:-500}" python3 -m opbisect verify "examples/$EX.py" --patch "$(csvs)" --runs 10 --out "$R" \
    --cpu-reference off
fi
pack
