#!/bin/bash
# Issue 42 on the H200: every patch over the shapes real models have, and the LM head at three vocabularies.
# Run on the device machine from the project root after `source /root/tfenv.sh` (../shared/gpu/README.md):
#   bash reports/h200/run_shapes.sh kernels   # build opbisect's op library (CUDA), check the cross-entropy op
#   bash reports/h200/run_shapes.sh sweep     # benchmarks/patch_sweep.py: table, JSON and plot
#   bash reports/h200/run_shapes.sh dense     # the sweep's dense ops only, then the LM head at 8k
#   bash reports/h200/run_shapes.sh lm        # opbisect verify of the LM head at vocabulary 8k, 32k, 128k
#   bash reports/h200/run_shapes.sh mixed     # opbisect verify of the BERT-base fit step under mixed precision
#   bash reports/h200/run_shapes.sh again     # one lease after the segment-sum kernel: the kernel checks, the 8k
#                                             # head, the sweep but the cross-entropy, BERT-base mixed, the 128k head
#   bash reports/h200/run_shapes.sh profiles  # where capture's and BERT-base mixed's time goes, the fingerprint
#                                             # kernel's forms, the combine kernels, the XLA candidate, the sweep
#   bash reports/h200/run_shapes.sh capture   # the side's first half alone, for a lease of 15 minutes: the check,
#                                             # capture timed both ways twice
#   bash reports/h200/run_shapes.sh side      # the digests on a second stream: checked bit for bit, then capture
#                                             # timed both ways twice and profiled; then the sweep (--copies), each
#                                             # row over 1.05x profiled (its device time and launches)
#   bash reports/h200/run_shapes.sh lean      # lean taps (element-wise outputs derived, not tapped): capture timed
#                                             # with them and with every tensor, twice (the first profiled), the
#                                             # sources both ways from one set of digests, then BERT-base mixed
#   bash reports/h200/run_shapes.sh leanquick # the lean capture alone, twice, no whole trace: for a short lease
#   bash reports/h200/run_shapes.sh leansweep # one lease: the lean capture twice, then the sweep of the ops whose
#                                             # rows carry no reason yet (8 copies a call, each row over 1.05x
#                                             # profiled), then on an H200 BERT-base mixed's verify
#   bash reports/h200/run_shapes.sh leanonly  # the lean capture alone twice, every tensor not timed: the least
#                                             # device time that answers issue 42's capture goal (about 3 minutes)
#   bash reports/h200/run_shapes.sh sweeponly # the sweep of SWEPT_AGAIN alone (8 copies a call, rows over 1.05x
#                                             # profiled): on an H100 it ran past 560 s in the segment sums' rows
#   bash reports/h200/run_shapes.sh sweeprest # the three op types sweeponly does not reach: the scatters, the resize
#   bash reports/h200/run_shapes.sh candidates # branch gpu-candidates against main: segment sums, scatter, NCHW,
#                                              # the resize gradient
#   bash reports/h200/run_shapes.sh nchw      # the channels-first bias gradient's own kernel: check_dense, its rows
#   bash reports/h200/run_shapes.sh lease14   # nchw; on an H200 leanonly and BERT-base mixed; sweeprest; candidates
#   bash reports/h200/run_shapes.sh lease15   # on an H200 leanonly and BERT-base mixed first; then candidates (run in
#                                             # lease16: AddRuns' dispatch, the resize gradient's tables)
#   bash reports/h200/run_shapes.sh lease16b  # on an H200 leanonly and BERT-base mixed; then candidates over the segment
#                                             # sums' and scatters' rows (round three: the block sort, AddRuns' blocks)
#   bash reports/h200/run_shapes.sh lease17   # the next lease: on an H200 leanonly and BERT-base mixed; then candidates
#                                             # (round four: the resize in two passes, the scatter into zeros), profiles
#   bash reports/h200/run_shapes.sh xla       # where XLA compiles the step and the patch alone does not hold (BERT-base
#                                             # mixed on an H100): what XLA compiled, counted; then `opbisect fix`,
#                                             # whose verify runs XLA's own switch (alone, under the patch)
#   bash reports/h200/run_shapes.sh xlaflags  # the plain and patched step under each of XLA's flags in turn
#   bash reports/h200/run_shapes.sh lease20   # the next lease: on an H200 leanonly and BERT-base mixed's verify; on
#                                             # another card the fix with the fusion autotuner's switch in verify (two
#                                             # fresh runs under it: the user's test)
#   bash reports/h200/run_shapes.sh lease20b  # on an H200 leanonly and BERT-base mixed's verify; else usertest: two
#                                             # fresh runs of the patch with and without the fusion autotuner's switch
#   bash reports/h200/run_shapes.sh pinned    # two fresh runs under XLA's autotuning results a first run wrote
#   bash reports/h200/run_shapes.sh lease21   # the next lease: on an H200 h200_goals; then XLA's autotuning cache
#                                             # directory: three fresh runs (the user's test) and the patch's cost;
#                                             # on another card then the fix (its ladder past the fusion switch)
#   bash reports/h200/run_shapes.sh lease22   # the next lease: on an H200 h200_goals; the patched step under the
#                                             # fusion switch, 100 runs from one state; fresh probes of 10 steps and
#                                             # twice 100 (the user's test by hand, its cost a step); then the fix
#                                             # from the script (its user's test now 100 steps)
#   bash reports/h200/run_shapes.sh plain100  # two fresh probes of 100 steps, the patch alone: the user's test by hand
#   bash reports/h200/run_shapes.sh lease23   # the next lease: on an H200 h200_goals; the fix from the script (its
#                                             # user's test 100 steps); a trace of 400 runs under the fusion switch
#   bash reports/h200/run_shapes.sh lease24   # the next lease: cuBLAS' fixed workspaces against the patched step's
#                                             # rare variation (400 runs, two fresh 100-step runs); on an H200
#                                             # leanonly (capture in blocks and in turn); the compiled step's float
#                                             # atomics; the fix from the script (its user's test 100 steps); a
#                                             # trace of 400 runs under the fusion switch
#   bash reports/h200/run_shapes.sh lease25   # the next lease: on an H200 leanonly, then lease24's atomics phase;
#                                             # lease25b the GEMMs' autotuning off (200 runs, two fresh runs);
#                                             # lease25c the fix from the script, its user's test 100 steps
#   bash reports/h200/run_shapes.sh lease27   # the next lease (lease26 ran on an H100): the digest kernel's forms;
#                                             # on an H200 leanonly; the fix from the script; then on an H200 the
#                                             # Triton switch by hand (200 runs, two fresh runs)
#   bash reports/h200/run_shapes.sh lease27b  # a short lease: capture in turn, the fix's verify of BERT-base mixed;
#                                             # on an H200 the kernel's forms and the Triton switch's user's test
#   bash reports/h200/run_shapes.sh lease28   # the compact fixed-point sum (2026-12-07): on an H200 leanonly; the
#                                             # segment sums' forms at BERT-base's word embedding; BERT-base mixed's
#                                             # patched step before (carried as .gpu/old) and after, then under the
#                                             # Triton switch (100 runs)
#   bash reports/h200/run_shapes.sh lease28b  # BERT-base mixed's patched step before (.gpu/old: its Adam sums in the
#                                             # fixed form) and after (main: in the scan since 9bc7913, h100 lease30)
#                                             # in turn, twice (here first: mkdir -p .gpu/old && git
#                                             # archive 245d9bc opbisect | tar x -C .gpu/old; carry .gpu/old)
#   bash reports/h200/run_shapes.sh lease30   # a short lease: on an H200 leanonly; the segment sum's forms beside
#                                             # the candidate fixed point by running sums (at c7c1036)
#   bash reports/h200/run_shapes.sh tritonnt  # BERT-base mixed's patch under the Triton switch, main's scan, twice
#   bash reports/h200/run_shapes.sh lease29   # the next lease: on an H200 issue 42's goals first (leanonly: capture
#                                             # twice; BERT-base mixed's patch at XLA's defaults, 10 runs, then
#                                             # under the Triton switch, 100 runs),
#                                             # then lease28b with one pair; on an H100 (where lease28b ran,
#                                             # h100/shapes#lease29) the fix of BERT-base mixed, 1,100 s
#                                             # (FIX_LIMIT=N: N s, for a lease with less left)
#   bash reports/h200/run_shapes.sh fixresume # after a lease whose fix its limit stopped: copy its
#                                             # shapes-PHASE-kept.tgz to .gpu/kept.tgz, carry it, and the fix goes
#                                             # on from its finished rounds and verify (fix --resume)
#   bash reports/h200/run_shapes.sh resize    # main's resize rows, the patch against the plain op
#   bash reports/h200/run_shapes.sh lease18   # on an H200 leanonly and BERT-base mixed's verify; then xla
#   bash reports/h200/run_shapes.sh lease19   # on an H200 leanonly and BERT-base mixed's verify, on another card the fix
#                                             # in its final form; then main's segment rows, and loss_scale_steps
#   bash reports/h200/run_shapes.sh merged    # the candidates merged from the first round (the resize gradient's own op
#                                             # in its stepped form, the channel sum, the tensor scatter): bits, rows
#   bash reports/h200/run_shapes.sh lease15b  # on an H200 leanonly; then merged
#   bash reports/h200/run_shapes.sh mixedfix  # opbisect fix of BERT-base mixed, from the script (a card whose
#                                             # sources the H200's patch does not cover)
# with the fix's patch (reports/h200/lm_head_xent/fix/patch.csv: other shapes give the same graph and node names).
NAME=shapes PHASE=${1:-sweep}
source "$(dirname "$0")/lib.sh"
export OPBISECT_CACHE=${OPBISECT_CACHE:-/root/opbisect-cache}
LM_PATCH=reports/h200/lm_head_xent/fix/patch.csv
lm() {  # lm LABEL SECONDS [VERIFY FLAGS] -- SCRIPT ARGS...: verify the LM head at one shape
  local label=$1 limit=$2; shift 2
  run "lm_head_$label-verify" "$limit" python3 -m opbisect verify examples/lm_head_xent.py --patch "$LM_PATCH" \
    --runs 10 --out "$R/lm_head_$label" --fingerprint wsum --cpu-reference off "$@"
}
build() { run build 300 python3 -c "from opbisect import kernels; print(kernels.build(cuda=True))"; }  # the op library
fpk() {  # the fingerprint op's GPU kernel against the forms it replaced and the read floor, same digests or not
  local nvcc; nvcc="$(python3 -c 'from opbisect import kernels; print(kernels.cuda_home())')/bin/nvcc"
  run fingerprint_kernel 200 bash -c "$nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/fpk benchmarks/fingerprint_kernel.cu && /tmp/fpk"
}
SWEPT_AGAIN=BiasAddGrad,UnsortedSegmentSum,SegmentSum,ResourceScatterAdd,TensorScatterAdd,ResizeBilinearGrad
SEGMENT_ROWS='embedding 8k x 256, 8k tokens;BERT word embedding;64k rows x 1k into 32k;32k x 512 table, 8k updates;32k x 512 tensor, 8k updates'
CANDIDATE_OPS=${CANDIDATE_OPS:-UnsortedSegmentSum,SegmentSum,ResourceScatterAdd,TensorScatterAdd,ResizeBilinearGrad}
CANDIDATE_SHAPES=${CANDIDATE_SHAPES:-$SEGMENT_ROWS;112 -> 56, 64 channels;224 -> 112, 3 channels}
MIXED_PATCH=reports/h100/shapes/lease19/bert_like_fit_mixed-fix/patch.csv  # the H200's two segment sums
FUSION_OFF=--xla_gpu_experimental_enable_fusion_autotuner=false AUTOTUNED=/root/autotuned.textproto
NO_TRITON="$FUSION_OFF --xla_gpu_enable_triton_gemm=false"  # verify's XLA_NO_TRITON_GEMM
AUTOTUNE_OFF="$FUSION_OFF --xla_gpu_autotune_level=0"
CACHE_DIR=--xla_gpu_per_fusion_autotune_cache_dir=/root/xla-autotune-cache
probe() {  # probe NAME STEPS: BERT-base mixed under the patch in a fresh process, each step's digests to NAME.json
  OPBISECT_BERT=base run "$1" 240 python3 -m opbisect trace --patch "$MIXED_PATCH" --steps "$2" --probe "$R/$1.json" \
    --no-fresh-check --no-progress --out "$R/$1" examples/bert_like_fit_mixed.py
}
apart() {  # apart NAME A B: the first step after which two probes' digests differ, and the variables there
  run "$1" 30 python3 -c 'import sys; from opbisect.record import store; from opbisect.execute.digest import first_apart
a, b = ([p.initial, *p.after] for p in map(store.load_probe, sys.argv[1:])); print(len(b), "steps; apart:", first_apart(a, b))' \
    "$R/$2.json" "$R/$3.json"
}
on_h200() { grep -q H200 "$R/gpu.txt"; }
# COMMAND on the tree at 245d9bc, carried as .gpu/old. `python3 -m` and `-c` put the working folder first on
# sys.path, ahead of PYTHONPATH, so without the safe path (Python 3.11+) they import this tree's opbisect (lease29's
# first try did: its which_before named /work/main/opbisect); the phases check which_before names .gpu/old
before() { PYTHONSAFEPATH=1 PYTHONPATH="$PWD/.gpu/old:$PYTHONPATH" "$@"; }
atomics() {  # BERT-base mixed under the patch and the fusion switch, compiled once with XLA's dump (two runs, no
  # timing): the census, then each kernel whose PTX adds floats atomically; the largest modules' HLO and PTX kept
  local d=/root/xladump; rm -rf "$d"
  OPBISECT_BERT=base XLA_FLAGS="$FUSION_OFF --xla_dump_to=$d --xla_dump_hlo_as_text" run atomics_verify 300 \
    python3 -m opbisect verify examples/bert_like_fit_mixed.py --patch "$MIXED_PATCH" --runs 2 --timing-runs 0 \
    --confirm-runs 0 --no-switches --cpu-reference off --fingerprint wsum --out /root/atomics
  run dump_files 20 bash -c "ls $d | sed -E 's/.*[.]//' | sort | uniq -c; du -sh $d"
  run census 60 python3 benchmarks/xla_census.py "$d" --top 8
  run atomics 60 python3 benchmarks/xla_census.py "$d" --atomics
  run scatters 60 python3 benchmarks/xla_census.py "$d" --scatters
  mkdir -p "$R/xladump"; local f
  for f in $(ls -S "$d"/*after_optimizations.txt | head -2) $(ls -S "$d"/*.ptx | head -2); do gzip -c "$f" > "$R/xladump/${f##*/}.gz"; done
  pack
}
xla_verify() {  # xla_verify NAME PATCH OUT [VERIFY FLAGS]: BERT-base mixed, the plain and patched step under
  # $XLA_FLAGS (10 runs, 10 timed steps, no switches)
  OPBISECT_BERT=base run "$1" 300 python3 -m opbisect verify examples/bert_like_fit_mixed.py --patch "$2" --runs 10 \
    --timing-runs 10 --no-switches --cpu-reference off --fingerprint wsum --out "$3" "${@:4}"
}
gemms() {  # the suspects lease24 left: the GEMMs XLA's autotuner picks (the fusion switch leaves it on). With all
  # autotuning off (lease19: one result in 10, 7x) 200 runs (400 ran past 200 s in lease24), then the user's test by
  # hand (two fresh 100-step probes)
  XLA_FLAGS="$AUTOTUNE_OFF" xla_verify autotune0_200 "$MIXED_PATCH" /root/autotune0 --confirm-runs 200
  for n in a b; do XLA_FLAGS="$AUTOTUNE_OFF" probe "at0_100$n" 100; done
  apart at0_100_apart at0_100a at0_100b
}
cublas() {  # the patched step's rare variation under the fusion switch (2 runs in 100, lease22), 400 runs with and
  # without cuBLAS' fixed workspaces (its docs: with more than one stream active it may pick other internals), then
  # the user's test by hand under the workspaces (two fresh probes of 100 steps)
  XLA_FLAGS="$FUSION_OFF" xla_verify confirm400 "$MIXED_PATCH" /root/confirm400 --confirm-runs 400
  CUBLAS_WORKSPACE_CONFIG=:4096:8 XLA_FLAGS="$FUSION_OFF" xla_verify confirm400_ws "$MIXED_PATCH" /root/confirm400_ws \
    --confirm-runs 400
  for n in a b; do CUBLAS_WORKSPACE_CONFIG=:4096:8 XLA_FLAGS="$FUSION_OFF" probe "ws100$n" 100; done
  apart ws100_apart ws100a ws100b
}
segments_main() {  # main's segment and scatter rows, each patch against the plain op
  run segments_main 400 python3 benchmarks/patch_sweep.py --device gpu --plain-and-patch --json \
    "$R/segments_main.json" --ops UnsortedSegmentSum,SegmentSum,ResourceScatterAdd --shapes "$SEGMENT_ROWS"
}
h200_goals() {  # issue 42's goals that name the H200: the lean capture twice, BERT-base mixed's verify
  bash "$0" leanonly; OPBISECT_BERT=base verify bert_like_fit_mixed 500
}
case $PHASE in
  kernels) build
           run check_dense 200 python3 benchmarks/check_dense.py ;;
  sweep) run sweep 560 python3 benchmarks/patch_sweep.py --device gpu --json "$R/sweep.json" --plot "$R/sweep.png" ;;
  dense) run sweep 300 python3 benchmarks/patch_sweep.py --device gpu --ops BiasAddGrad,SparseSoftmaxCrossEntropyWithLogits \
           --json "$R/sweep.json" --plot "$R/sweep.png"
         lm 8k 280 -- --vocab 8192 --dim 256 --batch 32 --seq 256 ;;
  lm) lm 8k 280 -- --vocab 8192 --dim 256 --batch 32 --seq 256
      lm 32k 280 -- --vocab 32768 --dim 512 --batch 32 --seq 128
      lm 128k 280 -- --vocab 131072 --dim 512 --batch 8 --seq 256 ;;
  mixed) OPBISECT_BERT=base verify bert_like_fit_mixed 500 ;;
  again) build
         run check_dense 200 python3 benchmarks/check_dense.py
         run check_combine 300 python3 benchmarks/check_combine.py
         lm 8k 280 -- --vocab 8192 --dim 256 --batch 32 --seq 256
         run sweep 900 python3 benchmarks/patch_sweep.py --device gpu --ops "$SWEPT_AGAIN" --json "$R/sweep.json" \
           --plot "$R/sweep.png"
         OPBISECT_BERT=base verify bert_like_fit_mixed 500
         lm 128k 500 --no-switches -- --vocab 131072 --dim 512 --batch 8 --seq 256 ;;
  profiles) build
            run check_combine 300 python3 benchmarks/check_combine.py
            fpk
            OPBISECT_BERT=base run capture_profile 400 python3 benchmarks/capture_overhead.py --device gpu \
              --repeats 30 --runs 2 --fingerprints fused --profile 10
            OPBISECT_BERT=base run mixed_profile 400 python3 benchmarks/patch_overhead.py \
              examples/bert_like_fit_mixed.py reports/h200/bert_like_fit_mixed/sources.csv --device gpu --steps 60
            # the candidate on branch xla-ranked-fixed-sum, checked out beside (git archive into branch-xla/)
            [ -d branch-xla ] && run xla_segment_sum 300 bash -c "cd branch-xla && python3 benchmarks/xla_segment_sum.py"
            run sweep 900 python3 benchmarks/patch_sweep.py --device gpu --json "$R/sweep.json" --plot "$R/sweep.png" ;;
  capture) build  # a short lease
           run check_side_stream 300 python3 benchmarks/check_side_stream.py --calls 5
           for n in 1 2; do
             OPBISECT_BERT=base run "capture_side_$n" 400 python3 benchmarks/capture_overhead.py --device gpu \
               --repeats 30 --runs 2 --fingerprints fused,fused-side --side-groups 96,512
           done ;;
  side) build
        run check_side_stream 300 python3 benchmarks/check_side_stream.py
        OPBISECT_BERT=base run check_side_stream_base 300 python3 benchmarks/check_side_stream.py --calls 5
        for n in 1 2; do  # issue 42's done-when: two runs of the same command, one lease
          OPBISECT_BERT=base run "capture_side_$n" 500 python3 benchmarks/capture_overhead.py --device gpu \
            --repeats 30 --runs 2 --fingerprints fused,fused-side --side-groups 96,512 \
            $([ $n = 1 ] && echo --profile 10)
        done
        # the rows over 1.05x that carry no measured reason yet, first (a lease of 30 minutes may end in the sweep)
        run sweep 450 python3 benchmarks/patch_sweep.py --device gpu --ops "$SWEPT_AGAIN" --profile-over 1.05 \
          --json "$R/sweep.json" --plot "$R/sweep.png" ;;
  lean) build
        for n in 1 2; do  # issue 42's done-when: two runs of the same command, one lease
          OPBISECT_BERT=base run "capture_lean_$n" 500 python3 benchmarks/capture_overhead.py --device gpu \
            --repeats 30 --runs 2 --fingerprints fused --taps lean,all $([ $n = 1 ] && echo --profile 10)
        done
        for ex in bert_like_fit scatter_segment_resize embedding_table_sgd conv2d_net; do
          run "check_lean_$ex" 300 python3 benchmarks/check_lean_taps.py "examples/$ex.py" --device gpu --runs 5
        done
        OPBISECT_BERT=base verify bert_like_fit_mixed 500 ;;
  mixedfix) OPBISECT_BERT=base fixed bert_like_fit_mixed 900 ;;  # where the H200's patch does not hold (an H100)
  leanquick) build  # 3 minutes
             for n in 1 2; do
               OPBISECT_BERT=base run "capture_lean_$n" 300 python3 benchmarks/capture_overhead.py --device gpu \
                 --repeats 30 --runs 0 --fingerprints fused --taps lean,all
             done ;;
  leanonly) build
            for n in 1 2; do
              OPBISECT_BERT=base run "capture_lean_$n" 200 python3 benchmarks/capture_overhead.py --device gpu \
                --repeats 30 --runs 0 --fingerprints fused --taps lean
            done ;;
  sweeponly) build
             run sweep 560 python3 benchmarks/patch_sweep.py --device gpu --ops "$SWEPT_AGAIN" --profile-over 1.05 \
               --json "$R/sweep.json" --plot "$R/sweep.png" ;;
  sweeprest) build
             run sweep 540 python3 benchmarks/patch_sweep.py --device gpu --profile-over 1.05 \
               --ops ResourceScatterAdd,TensorScatterAdd,ResizeBilinearGrad --json "$R/sweep.json" --plot "$R/sweep.png" ;;
  candidates) # branch gpu-candidates against main, in turn, twice, after its kernels' bits (round one, lease15: the
              # channel sum's loads in flight, the resize gradient's own kernel and the tensor scatter as the tensor
              # plus its slots' sums are merged since; on the branch: AddRuns' warps by the ids' count, the resize
              # gradient's taps and spans from tables; the branch leaves BiasAddGrad as main has it). First, here (only what the runs need, for the carry):
              # mkdir -p branch-candidates && git archive gpu-candidates opbisect benchmarks | tar -x -C branch-candidates
           build
           run check_combine_branch 300 bash -c "cd branch-candidates && python3 benchmarks/check_combine.py"
           run check_dense_branch 300 bash -c "cd branch-candidates && python3 benchmarks/check_dense.py"
           for n in 1 2; do
             for tree in main candidates; do  # main's tree is this folder, the candidate's branch-candidates
               run "candidates_${tree}_$n" 300 bash -c "cd $([ $tree = main ] && echo . || echo branch-candidates) && \
                 python3 benchmarks/patch_sweep.py --device gpu --plain-and-patch --json $R/candidates_${tree}_$n.json \
                 --ops $CANDIDATE_OPS --shapes '$CANDIDATE_SHAPES'"
             done
           done ;;
  nchw) build  # the channels-first bias gradient's own kernel (OpbisectChannelSum): checked, then its sweep rows
        run check_dense 300 python3 benchmarks/check_dense.py
        run sweep_nchw 200 python3 benchmarks/patch_sweep.py --device gpu --ops BiasAddGrad --profile-over 1.05 \
          --shapes 'ResNet stage 1, NCHW' --json "$R/sweep_nchw.json" ;;
  lease14) # one lease, most wanted first: the NCHW kernel (new), on an H200 the capture goal twice and BERT-base
           # mixed, then the sweep's last three op types (rows with no reason yet), then the AddRuns candidate
           bash "$0" nchw
           if on_h200; then h200_goals; fi
           bash "$0" sweeprest
           if [ -d branch-candidates ]; then bash "$0" candidates; fi ;;
  lease15) # the two goals only an H200 can answer first (a lease may end early), then the branch's candidates
           build
           if on_h200; then h200_goals; fi
           if [ -d branch-candidates ]; then bash "$0" candidates; fi ;;
  lease16b) # on an H200 the two goals it alone can answer; then round three of the candidates (the ids' sort in one
            # block up to 8,192 ids, AddRuns at two blocks a multiprocessor): the segment sums' and scatters' rows only
            build
            if on_h200; then h200_goals; fi
            if [ -d branch-candidates ]; then
              CANDIDATE_OPS=UnsortedSegmentSum,SegmentSum,ResourceScatterAdd,TensorScatterAdd \
                CANDIDATE_SHAPES="$SEGMENT_ROWS" bash "$0" candidates
              run candidates_profile 300 bash -c "cd branch-candidates && python3 benchmarks/patch_sweep.py --device gpu \
                --plain-and-patch --profile-over 1.05 --ops UnsortedSegmentSum,ResourceScatterAdd \
                --shapes 'embedding 8k x 256, 8k tokens;BERT word embedding;32k x 512 table, 8k updates'"
            fi ;;
  lease17) # the next lease: on an H200 the two goals it alone can answer; then round four of the candidates (the
           # resize gradient one axis at a time, the segment sum's scatter into zeros not reading them) against main
           # over the segment, scatter and resize rows, twice; then main's and the branch's rows over 1.05x profiled
           build
           if on_h200; then h200_goals; fi
           [ -d branch-candidates ] && bash "$0" candidates
           for tree in main candidates; do
             run "profile_$tree" 300 bash -c "cd $([ $tree = main ] && echo . || echo branch-candidates) && python3 \
               benchmarks/patch_sweep.py --device gpu --plain-and-patch --profile-over 1.05 --ops $CANDIDATE_OPS \
               --shapes '$CANDIDATE_SHAPES'"
           done ;;
  xla) # the plain and the patched step compiled once with XLA's HLO dump (two runs, no timing), its census; then the
       # fix from the script: its verify has XLA's own switch, and its user's test tries the variants in turn
       OPBISECT_BERT=base XLA_FLAGS="--xla_dump_to=/root/xladump --xla_dump_hlo_as_text" run census_verify 300 \
         python3 -m opbisect verify examples/bert_like_fit_mixed.py --patch reports/h200/bert_like_fit_mixed/sources.csv \
         --runs 2 --timing-runs 0 --no-switches --cpu-reference off --fingerprint wsum --out /root/census
       run census 60 python3 benchmarks/xla_census.py /root/xladump --top 8
       OPBISECT_BERT=base fixed bert_like_fit_mixed 1100 ;;
  xlaflags) # which of XLA's choices the patched step still varies in (BERT-base mixed on an H100): the plain and
            # the patched step under each XLA_FLAGS in turn (10 runs, 10 timed steps), the first with none
            # (XLA aborts on a flag it does not know: such a run fails in seconds and says so in its .txt)
            # (the first compile on a fresh machine, autotuning included, took 180 s of the run without flags)
            for f in "" ${XLA_FLAG_SET:---xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true}; do
              XLA_FLAGS="$f" xla_verify "verify${f:-_none}" reports/h200/bert_like_fit_mixed/sources.csv "/root/xfv$f"
            done ;;
  lease20) build
           if on_h200; then h200_goals
           else OPBISECT_BERT=base fixed bert_like_fit_mixed 900; fi ;;
  usertest) build  # the user's test by hand (fix's, for the model/data form): two fresh probes of 10 steps, the patch
                   # alone and under the fusion autotuner's switch
            for flags in "$FUSION_OFF" ""; do
              tag=patch${flags:+_fusion_off}
              for n in 1 2; do XLA_FLAGS=$flags probe "${tag}_$n" 10; done
              apart "${tag}_apart" "${tag}_1" "${tag}_2"
            done ;;
  lease20b) if on_h200; then h200_goals; else bash "$0" usertest; fi ;;  # what 800 s of a lease holds
  pinned) build  # lease20's last calls, by hand: XLA's autotuning results written by one process, read by the next
          XLA_FLAGS="$FUSION_OFF --xla_gpu_dump_autotune_results_to=$AUTOTUNED" probe pinned_0 3
          for n in 1 2; do XLA_FLAGS="$FUSION_OFF --xla_gpu_load_autotune_results_from=$AUTOTUNED" probe "pinned_$n" 3; done
          apart pinned_apart pinned_1 pinned_2
          for n in 3 4; do XLA_FLAGS="--xla_gpu_load_autotune_results_from=$AUTOTUNED" probe "pinned_$n" 3; done
          apart loaded_apart pinned_3 pinned_4 ;;
  lease21) build  # XLA's own persistent autotuning cache (one flag) in place of pinned's two; what the patch costs so
           if on_h200; then h200_goals; fi
           for n in 1 2 3; do XLA_FLAGS="$FUSION_OFF $CACHE_DIR" probe "cached_$n" 10; done  # 1 writes, 2 and 3 read
           apart cached_apart cached_2 cached_3
           apart writer_apart cached_1 cached_2
           for f in "" "$FUSION_OFF $CACHE_DIR"; do
             XLA_FLAGS="$f" xla_verify "verify${f:+_cached}" "$MIXED_PATCH" "$R/v21${f:+_cached}"
           done
           # the fix from the script, its user's test refuting the fusion switch alone (lease20's runs, by hand)
           if ! on_h200; then OPBISECT_BERT=base fixed bert_like_fit_mixed 900; fi ;;
  lease22) build
           if on_h200; then h200_goals; fi
           # fresh runs under the fusion switch leave one trajectory at about 5% a step (lease21): its op, if a trace
           # of 100 runs from one state sees it (the uninstrumented step's runs give its rate in one process)
           OPBISECT_BERT=base XLA_FLAGS="$FUSION_OFF" run rare 500 python3 -m opbisect trace \
             examples/bert_like_fit_mixed.py --patch "$MIXED_PATCH" --runs 100 --no-fresh-check --no-replay \
             --no-progress --out "$R/rare"
           # the user's test at 100 steps, by hand (two fresh runs), and its cost per step (against 10 steps)
           for p in steps_10:10 steps_100a:100 steps_100b:100; do XLA_FLAGS="$FUSION_OFF" probe "${p%:*}" "${p#*:}"; done
           apart steps_100_apart steps_100a steps_100b
           # last, as the lease allows: the fix from the script, its user's test now 100 steps
           OPBISECT_BERT=base fixed bert_like_fit_mixed 900 ;;
  plain100) for n in a b; do probe "plain100$n" 100; done  # the user's test by hand, the patch alone (lease22's by hand)
            apart plain100_apart plain100a plain100b ;;
  lease23) build
           if on_h200; then h200_goals; fi
           OPBISECT_BERT=base fixed bert_like_fit_mixed 900  # the fix from the script, its user's test 100 steps
           # lease22's trace of 100 runs saw the step vary uninstrumented (2 runs in 100), not instrumented: its next
           OPBISECT_BERT=base XLA_FLAGS="$FUSION_OFF" run rare400 560 python3 -m opbisect trace \
             examples/bert_like_fit_mixed.py --patch "$MIXED_PATCH" --runs 400 --no-fresh-check --no-replay \
             --no-progress --out "$R/rare400" ;;
  lease24) build
           cublas
           if on_h200; then bash "$0" leanonly; fi  # capture twice: in blocks, and now in turn with the plain step
           atomics  # which of the compiled step's kernels add floats atomically, each with its TF op
           OPBISECT_BERT=base fixed bert_like_fit_mixed 900  # the fix from the script, its user's test 100 steps
           OPBISECT_BERT=base XLA_FLAGS="$FUSION_OFF" run rare400 450 python3 -m opbisect trace \
             examples/bert_like_fit_mixed.py --patch "$MIXED_PATCH" --runs 400 --no-fresh-check --no-replay \
             --no-progress --out "$R/rare400" ;;
  lease25) build  # lease24 after its cublas phase (run there on an H100: ../../h100/shapes/README.md#lease24)
           if on_h200; then bash "$0" leanonly; fi
           atomics ;;  # its census now reads an atomic's qualifiers in any order
  lease25b) build; gemms ;;  # in calls of their own, so that the census can decide which runs next
  lease25d) build  # autotuning off gave one result (lease25b): which autotuner, and the plain step at no flag beside
            XLA_FLAGS="" xla_verify default_plain "$MIXED_PATCH" /root/default_plain --runs 2 --confirm-runs 0
            XLA_FLAGS="$NO_TRITON" xla_verify notriton200 "$MIXED_PATCH" /root/notriton200 --confirm-runs 200
            XLA_FLAGS="--xla_gpu_exclude_nondeterministic_ops=true" xla_verify exclude200 "$MIXED_PATCH" \
              /root/exclude200 --confirm-runs 200 ;;
  lease25e) for n in a b; do XLA_FLAGS="$NO_TRITON" probe "nt100$n" 100; done
            apart nt100_apart nt100a nt100b ;;  # the user's test by hand under Triton's GEMMs off
  lease25f) PHASE=lease25e R=/root/$NAME/lease25e  # two more, beside lease25e's (and packed with them)
            for n in c d; do XLA_FLAGS="$NO_TRITON" probe "nt100$n" 100; done
            apart nt100_apart_cd nt100c nt100d; apart nt100_apart_ac nt100a nt100c ;;
  lease26|lease27) build  # lease27 the next lease, as lease26 (run on an H100: ../../h100/shapes/README.md#lease26).
           # On an H200 issue 42's capture goal; the fix from the script on either card (its
           # verify and user's test try the Triton switch after the patch and the fusion switch); then on an H200
           # the Triton switch by hand (one result in 200 on an H100, lease25), as time allows
           fpk  # the op's kernel in its loads-first form (2026-12-07), against the strided form before it
           if on_h200; then bash "$0" leanonly; fi
           OPBISECT_BERT=base fixed bert_like_fit_mixed 1100  # 900 s ran out inside verify (lease26, an H100)
           if on_h200; then
             XLA_FLAGS="$NO_TRITON" xla_verify notriton200 "$MIXED_PATCH" /root/notriton200 --confirm-runs 200
             for n in a b; do XLA_FLAGS="$NO_TRITON" probe "nt100$n" 100; done
             apart nt100_apart nt100a nt100b
           fi ;;
  lease25c) build; OPBISECT_BERT=base fixed bert_like_fit_mixed 900 ;;
  lease28) build  # the segment sum under XLA with its int64 sums one slot per input row, not per output row
           if on_h200; then bash "$0" leanonly; fi
           run xla_segment_sum 240 python3 benchmarks/xla_segment_sum.py --device gpu
           # the patch before the change (the tree at 245d9bc, carried as .gpu/old) and after, each against the
           # plain step in its own process, 20 timed steps
           before xla_verify mixed_before "$MIXED_PATCH" "$R/mixed_before" --timing-runs 20
           xla_verify mixed_after "$MIXED_PATCH" "$R/mixed_after" --timing-runs 20
           XLA_FLAGS="$NO_TRITON" xla_verify mixed_after_nt "$MIXED_PATCH" "$R/mixed_after_nt" --timing-runs 20 \
             --confirm-runs 100 ;;
  lease29) build
           if on_h200; then
             bash "$0" leanonly
             XLA_FLAGS= xla_verify mixed_default "$MIXED_PATCH" "$R/mixed_default" --timing-runs 20  # 1.05-1.07x in lease22
             XLA_FLAGS="$NO_TRITON" xla_verify mixed_nt "$MIXED_PATCH" "$R/mixed_nt" --timing-runs 20 --confirm-runs 100
           fi
           # lease28b ran on an H100 (../../h100/shapes/README.md#lease29); there the fix ending on the Triton
           # switch is what is left (its limit may stop it: fixresume goes on from its kept folder; FIX_LIMIT
           # shortens it to what a lease has left, so that the kept folder is packed before the lease ends)
           if on_h200; then PAIRS=1 bash "$0" lease28b
           else OPBISECT_BERT=base fixed bert_like_fit_mixed "${FIX_LIMIT:-1100}"; fi ;;
  lease30) # a short lease (2026-12-07, 526 s of device time left): on an H200 capture twice first (issue 42's goal);
           # then the segment sum's forms with the candidate fixed point by running sums (benchmarks/xla_segment_sum.py)
           if on_h200; then bash "$0" leanonly; fi
           run xla_segment_sum 240 python3 benchmarks/xla_segment_sum.py --device gpu --calls 30 ;;
  tritonnt) build  # BERT-base mixed's patch under the Triton switch with main's scan (lease28 had it with the
            # compact fixed point, since dropped): twice, 100 runs, 20 timed steps
            for n in 1 2; do
              XLA_FLAGS="$NO_TRITON" xla_verify "mixed_nt_$n" "$MIXED_PATCH" "$R/mixed_nt_$n" --timing-runs 20 \
                --confirm-runs 100
            done ;;
  lease28b) build  # the step before (245d9bc: the Adam sums' counts unknown while tracing took the fixed form)
            # and after (the form XLA's shapes pick: the scan, with its other rows dropped past the end)
            before run which_before 30 python3 -c "import opbisect.patches.reductions as r; print(r.__file__)"
            grep -q "/.gpu/old/opbisect/" "$R/which_before.txt" || { echo "before() imports this tree"; exit 125; }
            for n in $(seq "${PAIRS:-2}"); do  # each against the plain step in its own process, 5 runs, 20 timed steps
              before xla_verify "mixed_before_$n" "$MIXED_PATCH" "$R/mixed_before_$n" --runs 5 --confirm-runs 0 \
                --timing-runs 20
              xla_verify "mixed_after_$n" "$MIXED_PATCH" "$R/mixed_after_$n" --runs 5 --confirm-runs 0 --timing-runs 20
            done ;;
  fixresume) build  # the fix of BERT-base mixed a lease's limit stopped, resumed: its kept folder (the previous
             # lease's shapes-PHASE-kept.tgz, carried as .gpu/kept.tgz) unpacked where the fix writes, then --resume
             # (its rounds are taken on a card of the same model only: on another the fix starts over, a0eb660)
             tar xzf .gpu/kept.tgz -C "$R"
             OPBISECT_BERT=base fixed bert_like_fit_mixed 1100 --resume ;;
  lease27b) build  # lease27 for a short lease (2026-12-07: an hour of refusals left no time for the fix's 1,100 s):
           # capture in turn with the plain step (never run on a GPU), the fix's own verify of BERT-base mixed (its
           # switches, the Triton one among them; the per-run copy gone since f50d391), on an H200 the digest
           # kernel's forms and the user's test by hand under the Triton switch
           # (in the order of what a short lease can afford: on an H200 its goals first; on an H100, where capture
           # met its goal, the verify first)
           if on_h200; then
             bash "$0" leanonly
             fpk
             for n in a b; do XLA_FLAGS="$NO_TRITON" probe "nt100$n" 100; done
             apart nt100_apart nt100a nt100b
           fi
           OPBISECT_BERT=base run mixed_verify 600 python3 -m opbisect verify examples/bert_like_fit_mixed.py \
             --patch "$MIXED_PATCH" --out "$R/mixed_verify"
           if ! on_h200; then bash "$0" leanonly; fi ;;
  resize) run resize_main 300 python3 benchmarks/patch_sweep.py --device gpu --plain-and-patch --json \
            "$R/resize_main.json" --ops ResizeBilinearGrad --shapes '112 -> 56, 64 channels;224 -> 112, 3 channels' ;;
  lease18) build
           if on_h200; then h200_goals; fi
           bash "$0" xla
           # main's segment and scatter rows after round three (the block sort, AddRuns at two blocks an SM)
           segments_main ;;
  lease19) build
           if on_h200; then h200_goals
           else OPBISECT_BERT=base fixed bert_like_fit_mixed 900; fi  # verify's XLA variants, the user's test in turn
           segments_main
           OPBISECT_BERT=base run loss_scale_steps 300 python3 benchmarks/loss_scale_steps.py --steps 20 ;;
  merged) build
          run check_dense 300 python3 benchmarks/check_dense.py
          run sweep_merged 300 python3 benchmarks/patch_sweep.py --device gpu --plain-and-patch \
            --json "$R/sweep_merged.json" --ops ResizeBilinearGrad,BiasAddGrad,TensorScatterAdd \
            --shapes '112 -> 56, 64 channels;224 -> 112, 3 channels;ResNet stage 1, NCHW;32k x 512 tensor, 8k updates' ;;
  lease15b) build
            if on_h200; then bash "$0" leanonly; fi
            bash "$0" merged ;;
  leansweep) build
             for n in 1 2; do
               OPBISECT_BERT=base run "capture_lean_$n" 300 python3 benchmarks/capture_overhead.py --device gpu \
                 --repeats 30 --runs 0 --fingerprints fused --taps lean,all
             done
             run sweep 560 python3 benchmarks/patch_sweep.py --device gpu --ops "$SWEPT_AGAIN" --profile-over 1.05 \
               --json "$R/sweep.json" --plot "$R/sweep.png"
             # the H200's patch holds on an H200 only (an H100 gave 3 results in 10 with it: ../../h100/shapes)
             if on_h200; then OPBISECT_BERT=base verify bert_like_fit_mixed 400; fi ;;
esac
