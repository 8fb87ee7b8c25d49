# Helpers for a script run on the device machine: source it after setting NAME (the results folder) and PHASE.
# Results go to /root/$NAME/$PHASE/, packed after every step into $OUT/$NAME-$PHASE.tgz (no .npz inputs, no
# record.json: the device returns at most a few MB).
R=/root/$NAME/$PHASE; mkdir -p "$R"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
pack() { tar czf "${OUT:-/tmp/out}/$NAME-$PHASE.tgz" --exclude='*.npz' --exclude='record.json' -C "/root/$NAME" "$PHASE"; }
run() {  # run NAME SECONDS COMMAND...: output to $R/NAME.txt, exit code and seconds to $R/exits.txt
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local code=$?
  echo "$name exit=$code seconds=$(( $(date +%s) - start ))" | tee -a "$R/exits.txt"; tail -4 "$R/$name.txt"; pack
}
verify() {  # verify EXAMPLE SECONDS [CSV]: the patch against the plain step and the switches, 10 runs each
  run "$1-verify" "$2" python3 -m opbisect verify "examples/$1.py" --patch "${3:-reports/h200/$1/sources.csv}" \
    --runs 10 --out "$R" --fingerprint wsum --cpu-reference off
}
traced() {  # traced EXAMPLE SECONDS: opbisect trace --runs 5, then each reproducer it wrote in a fresh process
  run "$1" "$2" python3 -m opbisect trace "examples/$1.py" --runs 5 --out "$R" --no-progress
  local f start code
  for f in "$R/$1"/repro/*.py; do
    [ -f "$f" ] || continue
    start=$(date +%s); timeout 60 python3 "$f" > /tmp/repro.out 2>&1; code=$?
    echo "${f#$R/} exit=$code seconds=$(( $(date +%s) - start )): $(tail -1 /tmp/repro.out)" | tee -a "$R/reproducers.txt"
  done
  pack
}
overhead() {  # overhead EXAMPLE SECONDS: benchmarks/patch_overhead.py, the plain, imported and patched step in turn
  run "$1-overhead" "$2" python3 benchmarks/patch_overhead.py "examples/$1.py" "reports/h200/$1/sources.csv" \
    --device gpu --steps 60
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpu.txt"
fixed() {  # fixed EXAMPLE SECONDS [FIX FLAGS]: opbisect fix, from the script to a verified fix, in one command
  # (no CPU reference, as verify() above: a large step's CPU run would take the call's time)
  local ex=$1 limit=$2; shift 2
  run "$ex-fix" "$limit" python3 -m opbisect fix "examples/$ex.py" --out "$R" --fingerprint wsum --cpu-reference off \
    "$@"
  # a fix its limit stopped (SIGTERM) keeps its finished rounds and verify for `fix --resume`: packed whole (their
  # record.json too), for the next lease to go on from (run_shapes.sh fixresume)
  [ -d "$R/.$ex-fix.resume" ] && tar czf "${OUT:-/tmp/out}/$NAME-$PHASE-kept.tgz" -C "$R" ".$ex-fix.resume"
  return 0
}
