#!/bin/bash
# Session 17 on one H200: the pass recording the values inside bodies now lowers the loops and branches of a step
# traced for XLA (session 16's NotFoundError there: a body run whole on the GPU, with a host callback in it).
# Run on the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md):
#   bash reports/h200/session17/run.sh bodies   # the replay tests of a body under XLA; the two XLA examples whose
#                                               # sources are in a branch, traced, each reproducer in a fresh process
#   bash reports/h200/session17/run.sh check    # verify both with those traces' CSVs; the replay and verify tests
# Second lease: under XLA the values inside bodies are now threaded out of the compiled step (run without XLA,
# bert_like_fit_mixed's loss scale overflowed and the branch holding its sources was skipped):
#   bash reports/h200/session17/run.sh threaded  # the replay tests; both examples traced again, reproducers run
#   bash reports/h200/session17/run.sh verify    # verify both with `probe`'s CSVs; the test fixed after `check`
#                                                # (not run: the next lease's, after `probe`)
# Third lease: Keras leaves the batch dimension open where it traces, so under XLA a first run now threads out the
# values' shapes, then the values (the second lease's slots had no fixed shape: the run without XLA again):
#   bash reports/h200/session17/run.sh probe     # both examples traced again, reproducers run
set -u
SESSION=session17 PHASE=${1:-bodies}
source reports/h200/lib.sh
if [ "$PHASE" = bodies ]; then
  run replay-tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py -k "branch_inside or lowers"
  for ex in mixed_precision_fit bert_like_fit_mixed; do
    traced "$ex" 300
  done
elif [ "$PHASE" = threaded ]; then
  run loss-scale 120 bash -c "python3 reports/h200/session17/loss_scale.py 0; python3 reports/h200/session17/loss_scale.py 1"
  run replay-tests 200 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py -k "branch or lowers or fails or threaded"
  for ex in mixed_precision_fit bert_like_fit_mixed; do
    traced "$ex" 240
  done
elif [ "$PHASE" = probe ]; then
  for ex in bert_like_fit_mixed mixed_precision_fit; do
    traced "$ex" 200
  done
elif [ "$PHASE" = verify ]; then
  for ex in mixed_precision_fit bert_like_fit_mixed; do
    verify "$ex" 200 "/root/$SESSION/probe/$ex/sources.csv"
  done
  run tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_verify.py -k never_recommends
elif [ "$PHASE" = check ]; then
  for ex in mixed_precision_fit bert_like_fit_mixed; do
    verify "$ex" 200 "/root/$SESSION/bodies/$ex/sources.csv"
  done
  run tests 300 python3 -m pytest -q -p no:cacheprovider tests/test_replay.py tests/test_verify.py
fi
pack
