#!/bin/bash
# Session 18 on one H200: session 17's third lease ran before the probe carried each value's rank (commit 2a4a948),
# so bert_like_fit_mixed's sources, in the loss-scale branch of an XLA step, were still not replayed. One lease:
# Run on the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md):
#   bash reports/h200/session18/run.sh finish   # both XLA mixed-precision examples traced, each reproducer in a
#                                               # fresh process, then verified with those traces' own CSVs
#   bash reports/h200/session18/run.sh tests    # the replay and verify tests on the GPU
#   bash reports/h200/session18/run.sh suite    # the rest of the suite on the GPU, 4 workers (CI runs it on CPUs)
# Second lease: the rest of the suite on the GPU named lstm_embedding's CudnnRNNV3, whose
# one differing output is its reserve space, whose reproducer exits 0 in a fresh process: cuDNN workspace is not
# compared now (optypes.workspace):
#   bash reports/h200/session18/run.sh workspace  # lstm_embedding traced (reproducers run), verified
# Third lease, with the device time left: ResNet50 (the scale example, never traced to a report) traced, verified
# with its CSV, then its reproducers in fresh processes:
#   bash reports/h200/session18/run.sh resnet
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
elif [ "$PHASE" = suite ]; then  # each worker takes GPU memory as it needs it (4 taking it all: an InternalError)
  TF_FORCE_GPU_ALLOW_GROWTH=true run tests 540 python3 -m pytest -q -p no:cacheprovider tests -n 4 \
    --ignore=tests/test_replay.py --ignore=tests/test_verify.py
elif [ "$PHASE" = resnet ]; then
  run resnet50 120 python3 -m opbisect trace examples/resnet50.py --runs 5 --out "$R" --no-progress
  verify resnet50 200 "$R/resnet50/sources.csv"
  for f in "$R"/resnet50/repro/*.py; do
    [ -f "$f" ] || continue
    timeout 60 python3 "$f" > /tmp/repro.out 2>&1; echo "${f#$R/} exit=$?: $(tail -1 /tmp/repro.out)" | tee -a "$R/reproducers.txt"
    pack
  done
elif [ "$PHASE" = tests ]; then
  run tests 500 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py tests/test_verify.py
fi
pack
