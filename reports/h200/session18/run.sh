#!/bin/bash
# Session 18 on one H200: session 17's third lease ran before the probe carried each value's rank (commit 2a4a948),
# so bert_like_fit_mixed's sources, in the loss-scale branch of an XLA step, were still not replayed. One lease:
# Run on the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md):
#   bash reports/h200/session18/run.sh finish   # both XLA mixed-precision examples traced, each reproducer in a
#                                               # fresh process, then verified with those traces' own CSVs
#   bash reports/h200/session18/run.sh tests    # the replay and verify tests on the GPU
# Second lease: the rest of the suite on the GPU (by hand, beside the phases) named lstm_embedding's CudnnRNNV3, whose
# one differing output is its reserve space, whose reproducer exits 0 in a fresh process: cuDNN workspace is not
# compared now (optypes.workspace):
#   bash reports/h200/session18/run.sh workspace  # lstm_embedding traced (reproducers run), verified
set -u
SESSION=session18 PHASE=${1:-finish}
source reports/h200/lib.sh
if [ "$PHASE" = finish ]; then
  for ex in bert_like_fit_mixed mixed_precision_fit; do
    traced "$ex" 200
  done
  for ex in bert_like_fit_mixed mixed_precision_fit; do
    verify "$ex" 200 "$R/$ex/sources.csv"
  done
elif [ "$PHASE" = workspace ]; then
  traced lstm_embedding 120
  verify lstm_embedding 150 "$R/lstm_embedding/sources.csv"
elif [ "$PHASE" = tests ]; then
  run tests 500 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py tests/test_verify.py
fi
pack
