#!/bin/bash
# Session 19 on one H200: ResNet50, the last committed example with a GPU source and no verify. Session 18's trace
# named one source, the loss's SparseSoftmaxCrossEntropyWithLogits, with 3106 differing ops after it; its note
# says how to look behind it: trace again with that source patched, until a trace names nothing new. Then verify
# with every round's CSV. All steps write to /root/session19/resnet/. Run on the device machine from the project
# root, after `source /root/tfenv.sh` (../shared/gpu/README.md):
#   bash reports/h200/session19/run.sh trace    # round 1: trace (--runs 5); its reproducer in a fresh process
#   bash reports/h200/session19/run.sh behind   # rounds 2..: trace --patch <every earlier round's CSV>, each
#                                               # round's reproducers in fresh processes (8 at a time)
#   bash reports/h200/session19/run.sh verify   # verify --patch <every round's CSV>, 10 runs per variant
# A round whose CSV names an op type only a family switch fixes (cuDNN's) runs the later rounds with that switch
# set, as a user would: no rewrite exists for it, so a trace without it would name the same op again.
set -u
SESSION=session19 PHASE=resnet STEP=${1:-trace}
source reports/h200/lib.sh
export TF_FORCE_GPU_ALLOW_GROWTH=true  # reproducers share the GPU, 8 processes at a time
csvs() { ls "$R"/resnet50/sources.csv "$R"/round*/resnet50/sources.csv 2>/dev/null | paste -sd, -; }
switches() {  # the family switches that the op types of the CSVs so far need (no rewrite for them)
  python3 - "$@" <<'PY'
import sys, pandas as pd
from opbisect.patches import PATCHES
types = set().union(*(set(pd.read_csv(p, dtype=str).op_type) for p in sys.argv[1].split(",")))
print(" ".join(sorted({f"{PATCHES[t].switch}=1" for t in types if t in PATCHES and PATCHES[t].build is None})))
PY
}
repros() {  # repros FOLDER: each reproducer in a fresh process, 8 at a time; one line each to reproducers.txt
  ls "$1"/repro/*.py 2>/dev/null | xargs -r -P 8 -I{} bash -c \
    'out=$(timeout 120 python3 "{}" 2>&1); code=$?; echo "{} exit=$code: $(echo "$out" | tail -1)"' \
    | sed "s|$R/||" | tee -a "$R/reproducers.txt"
  pack
}
if [ "$STEP" = trace ]; then
  run resnet50 150 python3 -m opbisect trace examples/resnet50.py --runs 5 --out "$R" --no-progress
  repros "$R/resnet50"
elif [ "$STEP" = behind ]; then
  start=$(date +%s)
  for k in 2 3 4 5; do
    [ $(( $(date +%s) - start )) -lt 330 ] || break
    patch=$(csvs); sw=$(switches "$patch"); echo "round $k: --patch $patch ${sw:+under $sw}" | tee -a "$R/rounds.txt"
    mkdir -p "$R/round$k"
    run "round$k" 200 env $sw python3 -m opbisect trace examples/resnet50.py --runs 5 --out "$R/round$k" \
      --no-progress --patch "$patch"
    grep -q "^round$k exit=1 " "$R/exits.txt" || break
    repros "$R/round$k/resnet50"
  done
elif [ "$STEP" = verify ]; then
  patch=$(csvs)  # a fresh machine (the first lease was taken back during verify): the CSVs committed here
  [ -n "$patch" ] || patch=$(ls reports/h200/session19/resnet/resnet50/sources.csv \
    reports/h200/session19/resnet/round[23]/resnet50/sources.csv | paste -sd, -)
  verify resnet50 "${LIMIT:-560}" "$patch"
fi
pack
