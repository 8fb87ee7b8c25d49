#!/bin/bash
# From the script to a verified fix, one command per example, on the H200. Run on the device machine from the
# project root after `source /root/tfenv.sh` (../shared/gpu/README.md; the HF examples need run_hf.sh's
# EXTRA_WHEELS). One phase per call, each under the device's 10-minute limit:
#   bash reports/h200/run_fix.sh lm_head    # opbisect fix on the LM head, then benchmarks/patch_overhead.py on the
#                                           # fix's patch.csv: the patched step's cost measured twice in one lease
#   bash reports/h200/run_fix.sh resnet50   # ResNet50 (four rounds by hand before `fix`)
#   bash reports/h200/run_fix.sh hf         # the HF GPT-2 LM and BERT classifier under tf_keras
# Everything lands in /root/fix/<phase>/, packed into $OUT/fix-<phase>.tgz after every step; committed as
# reports/h200/<example>/fix/ (the fix folder) and fix.txt (what the terminal showed).
set -u
NAME=fix PHASE=${1:?phase: lm_head, resnet50 or hf}
source reports/h200/lib.sh
case $PHASE in
  lm_head)
    fixed lm_head_xent 430 --cpu-reference off
    run lm_head_xent-overhead 90 python3 benchmarks/patch_overhead.py examples/lm_head_xent.py \
      "$R/lm_head_xent-fix/patch.csv" --device gpu --steps 40 --profile-calls 10 ;;
  resnet50) fixed resnet50 560 ;;
  hf) fixed hf_gpt2_lm 280; fixed hf_bert_fit 280 ;;
esac
pack
