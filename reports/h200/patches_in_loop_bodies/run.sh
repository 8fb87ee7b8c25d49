#!/bin/bash
# Session 15 on one H200: a patched loop body is its own FunctionDef with only the chosen nodes changed (no longer
# traced again: the copy added an Identity per result and a NoOp that a host-bound loop ran every iteration); under
# XLA the segment-sum patch scans by blocks of 32 rows (log32 n levels instead of log2 n passes) and writes each
# key's sum by a segment sum of zeros and one value (the search it replaced compared every segment with every id).
# Run on the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md). Phases,
# each under the device's 10-minute call limit:
#   bash reports/h200/session15/run.sh patch    # build; the GPU tests; the XLA segment sum by scan; grad_accumulation
#                                               # and the XLA BERT-like fit step, patched against plain
#   bash reports/h200/session15/run.sh resnet   # the XLA ResNet50 scale row (reads, assignments, IdentityN untapped)
# Second lease, after the first showed the blocked scan no quicker than the doubling one (reverted) and the body's
# copy no cheaper than its retrace (a call of the patch inside a loop body stays a call; now its nodes are inlined):
#   bash reports/h200/session15/run.sh inline   # build; the GPU tests; the XLA segment sum's kernels; grad_accumulation
#                                               # patched against plain
#   bash reports/h200/session15/run.sh bodies   # verify: a source in a cond (mixed precision), the XLA BERT-like
#                                               # fit step (its segment sums now written without the search)
#   bash reports/h200/session15/run.sh resnet   # again, with AddN untapped under XLA (562 -> 440 taps)
# Third lease (the device time left, 337 s: no build), after the second showed the sort (a TopKV2) half the XLA
# segment sum's device time:
#   bash reports/h200/session15/run.sh sort     # the XLA segment sum, argsort against the packed keys' plain sort
set -u
SESSION=session15 PHASE=${1:-patch}
source reports/h200/lib.sh
if [ "$PHASE" = patch ]; then
  run tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py \
    tests/test_verify.py -k "combine or scan or segment or scatter or loop or body or inlined or two_named"
  run xla_segment_sum 150 python3 benchmarks/xla_segment_sum.py --device gpu
  overhead grad_accumulation 60
  verify grad_accumulation 80
  run bert_like_fit-overhead 90 python3 benchmarks/patch_overhead.py examples/bert_like_fit.py \
    reports/h200/bert_like_fit/sources.csv --device gpu --steps 60
  verify bert_like_fit 130
elif [ "$PHASE" = inline ]; then
  run tests 200 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_verify.py \
    -k "combine or loop or body or inlined or two_named or cond"
  run xla_segment_sum 100 python3 benchmarks/xla_segment_sum.py --device gpu
  overhead grad_accumulation 60
  verify grad_accumulation 80
elif [ "$PHASE" = bodies ]; then
  verify mixed_precision_fit 90
  verify bert_like_fit 150
elif [ "$PHASE" = sort ]; then
  run xla_segment_sum 100 python3 benchmarks/xla_segment_sum.py --device gpu
elif [ "$PHASE" = resnet ]; then
  OPBISECT_XLA=1 run scale_resnet50_xla 560 python3 benchmarks/scale.py --script examples/resnet50.py --device gpu
fi
pack
