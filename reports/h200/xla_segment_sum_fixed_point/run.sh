#!/bin/bash
# Session 16 on one H200: under XLA the segment-sum patch adds each segment's rows in fixed point (scaled by a power
# of two from the segment's largest magnitude, rounded to int64, added by XLA's own scatter: integer adds give the
# same bits in any order), where session 15's form sorted the keys and scanned (about 40 us a sum against XLA's 6).
# Run on the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md):
#   bash reports/h200/session16/run.sh fixed    # the patch's tests on the GPU; the XLA segment sum's forms side by side
#   bash reports/h200/session16/run.sh step     # the XLA BERT-like fit step: verify, and patched against plain
# Second lease: the other steps Keras compiles with XLA on a GPU (its jit_compile="auto"), whose segment sums now
# take the fixed form too, and the XLA BERT-like fit step again (a second sample):
#   bash reports/h200/session16/run.sh again
# Third lease: the patch and verify tests on the GPU (session 15's last change, to `trace --patch`, had not run there):
#   bash reports/h200/session16/run.sh tests
# Fourth lease: sources inside loop and branch bodies now replayed alone, with reproducers (each run in a fresh
# process): the three examples whose sources are in a body
#   bash reports/h200/session16/run.sh bodies
set -u
SESSION=session16 PHASE=${1:-fixed}
source reports/h200/lib.sh
if [ "$PHASE" = fixed ]; then
  run tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_patches.py \
    -k "fixed or exact or larger or any_ids or infinit or xla"
  run xla_segment_sum 120 python3 benchmarks/xla_segment_sum.py --device gpu
elif [ "$PHASE" = step ]; then
  verify bert_like_fit 150
  run bert_like_fit-overhead 100 python3 benchmarks/patch_overhead.py examples/bert_like_fit.py \
    reports/h200/bert_like_fit/sources.csv --device gpu --steps 60
elif [ "$PHASE" = again ]; then
  verify bert_like_fit_mixed 150
  verify mixed_precision_fit 120
  verify bert_like_fit 150
elif [ "$PHASE" = bodies ]; then
  for ex in grad_accumulation mixed_precision_fit bert_like_fit_mixed; do
    traced "$ex" 90
  done
elif [ "$PHASE" = tests ]; then
  run tests 480 python3 -m pytest -q -p no:cacheprovider tests/test_verify.py tests/test_patches.py
fi
pack
