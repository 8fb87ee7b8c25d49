#!/bin/bash
# Session 13 on one H200: the scatter op without the run numbering (each chunk finds its own segments by binary
# search; each run head finds its run's end by a galloping search, then adds the run's sum into its row: two
# kernels after the sort, three enqueues fewer a call), and the XLA trace with its taps digested together. Run on
# the device machine from the project root, after `source /root/tfenv.sh` (../shared/gpu/README.md; copy
# .whl/*.whl into .gpu/wheels for pydantic and hypothesis). Phases, each under the device's 10-minute call limit:
#   bash reports/h200/session13/run.sh check   # build; the op and the combine against their CPU kernels; tests
#   bash reports/h200/session13/run.sh steps   # patch_overhead.py and verify on the four sparse steps
#   bash reports/h200/session13/run.sh xla     # the XLA BERT-like scale row; verify on the XLA step
#   bash reports/h200/session13/run.sh graph   # after the sort replayed from a CUDA graph and the run heads found
#                                              # a tile at a time: the tests, patch_overhead.py on the four steps,
#                                              # and the XLA trace with and without parallel LLVM compilation
set -u
SESSION=session13 PHASE=${1:-check}
source reports/h200/lib.sh
if [ "$PHASE" = check ]; then
  run check_scatter 300 python3 reports/h200/session11/check_scatter.py
  run tests 200 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py
  run check_combine 150 python3 reports/h200/session10/check_combine.py
elif [ "$PHASE" = steps ]; then
  for e in scatter_add_table embedding_sgd embedding_table_sgd grad_accumulation; do overhead $e 60; done
  verify scatter_add_table 100
  verify embedding_sgd 70
  verify embedding_table_sgd 100
  verify grad_accumulation 80
elif [ "$PHASE" = xla ]; then
  OPBISECT_BERT=base run scale_bert_like_fit_xla 360 python3 benchmarks/scale.py --script examples/bert_like_fit.py \
    --device gpu
  verify bert_like_fit 150
elif [ "$PHASE" = graph ]; then
  run tests 200 python3 -m pytest -q -p no:cacheprovider tests/test_combine.py tests/test_patches.py
  for e in scatter_add_table embedding_sgd embedding_table_sgd grad_accumulation; do overhead $e 60; done
  timings() {  # the trace's own stage timings, from its record
    python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['meta']['timings']; print({k: round(v, 1) for k, v in t.items()})" \
      "$R/$1/bert_like_fit/record.json" >> "$R/$1.txt"
  }
  for flags in serial parallel; do
    x=""; [ $flags = parallel ] && x="--xla_gpu_force_compilation_parallelism=16 --xla_gpu_enable_llvm_module_compilation_parallelism=true"
    XLA_FLAGS="$x" run "xla-trace-$flags" 200 python3 -m opbisect trace examples/bert_like_fit.py --runs 5 \
      --no-replay --out "$R/xla-trace-$flags"
    timings "xla-trace-$flags"
  done
fi
pack
