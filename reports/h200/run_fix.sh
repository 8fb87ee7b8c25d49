#!/bin/bash
# From the script to a verified fix, one command per example, on the H200. Run on the device machine from the
# project root after `source /root/tfenv.sh` (../shared/gpu/README.md; the HF examples need run_hf.sh's
# EXTRA_WHEELS). One phase per call (a call runs 10 minutes at most; resnet50 needs background.sh):
#   bash reports/h200/run_fix.sh lm_head    # opbisect fix on the LM head, then benchmarks/patch_overhead.py on the
#                                           # fix's patch.csv: the patched step's cost measured twice in one lease
#   bash reports/h200/run_fix.sh resnet50   # ResNet50: four rounds and verify, 903 s, so through background.sh
#   bash reports/h200/run_fix.sh hf         # the HF GPT-2 LM and BERT classifier under tf_keras
#   bash reports/h200/run_fix.sh more       # hf, then resnet50 (about 1600 s: more than a lease has after its
#                                           # start); through background.sh (start, then `wait 560 /root/fix` calls)
# Everything lands in /root/fix/<phase>/, packed into $OUT/fix-<phase>.tgz after every step; committed as
# reports/h200/<example>/fix/ (the fix folder) and fix.txt (what the terminal showed).
set -u
NAME=fix PHASE=${1:?phase: lm_head, resnet50, hf or more}
if [ "$PHASE" = more ]; then bash "$0" hf; bash "$0" resnet50; exit; fi
source reports/h200/lib.sh
case $PHASE in
  lm_head)
    fixed lm_head_xent 430
    run lm_head_xent-overhead 90 python3 benchmarks/patch_overhead.py examples/lm_head_xent.py \
      "$R/lm_head_xent-fix/patch.csv" --device gpu --steps 40 --profile-calls 10 ;;
  resnet50) fixed resnet50 1500 ;;  # 903 s measured; the limit is what a lease has after the start
  hf) fixed hf_gpt2_lm 420; fixed hf_bert_fit 420 ;;
esac
pack
