#!/usr/bin/env bash
# Makes the CPU entries of the gallery again (reports/README.md): each example traced with its page, then fixed, and
# the entry's README (what it shows, the commands, the answers' first lines, links to the pages).
# From the repository root, with opbisect installed (.venv): bash reports/gallery/make.sh  (about 3 minutes on 2 cores)
# Keeps the views a reader opens (summary.txt, report.html, sources.csv, the fix's summary, page and patch); the
# records, reproducers and per-round folders are left out (make them again with the same commands).
set -uo pipefail
cd "$(dirname "$0")/../.."
OPBISECT=${OPBISECT:-.venv/bin/opbisect}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

entry() {  # entry NAME SCRIPT "WHAT IT SHOWS" [TRACE FLAGS...]: trace with its page, then fix, then the README
  local name=$1 script=$2 what=$3; shift 3
  local stem; stem=$(basename "$script" .py)
  local keep=reports/gallery/$name
  rm -rf "$keep" && mkdir -p "$keep/trace" "$keep/fix"
  "$OPBISECT" trace "$script" --html --no-progress --out "$tmp/$name" "$@" > "$keep/trace/terminal.txt" 2>&1
  local traced=$?
  echo "exit $traced" >> "$keep/trace/terminal.txt"
  cp "$tmp/$name/$stem"/{summary.txt,report.html,sources.csv} "$keep/trace/"
  "$OPBISECT" fix "$script" --out "$tmp/$name-fix" > "$keep/fix/terminal.txt" 2>&1
  local fixed=$?
  echo "exit $fixed" >> "$keep/fix/terminal.txt"
  local folder="$tmp/$name-fix/$stem-fix"
  cp "$folder"/{summary.txt,report.html} "$keep/fix/"
  [ -f "$folder/patch.csv" ] && cp "$folder/patch.csv" "$keep/fix/"
  # the pages link to the files left out: the links say where they would be, the README says how to make them
  sed -i "s#$tmp/[^\" <]*/##g" "$keep"/*/summary.txt "$keep"/*/terminal.txt "$keep"/*/report.html
  readme "$keep" "$script" "$what" "$traced" "$fixed" "$*"
}

python_of_opbisect() {  # the Python opbisect is installed in
  "$(dirname "$(command -v "$OPBISECT")")/python" "$@"
}

answer() {  # the first line of a summary and the indented lines under it: the answer
  awk 'NR == 1 { print; next } /^  / { print; next } { exit }' "$1"
}

readme() {
  local keep=$1 script=$2 what=$3 traced=$4 fixed=$5 flags=$6
  {
    echo "# \`$script\`"
    echo
    echo "$what"
    echo
    echo "Made by \`bash reports/gallery/make.sh\` at commit $(git rev-parse --short HEAD) on $(date -u +%Y-%m-%d):" \
      "$(nproc) CPU cores, TensorFlow $(python_of_opbisect -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)."
    echo
    echo "## \`opbisect trace $script${flags:+ $flags} --html\`: exit $traced"
    echo
    echo '```'
    answer "$keep/trace/summary.txt"
    echo '```'
    echo
    echo "[the page](trace/report.html) · [the whole summary](trace/summary.txt) · [sources.csv](trace/sources.csv) ·"
    echo "[what the terminal showed](trace/terminal.txt)"
    echo
    echo "## \`opbisect fix $script\`: exit $fixed"
    echo
    echo '```'
    answer "$keep/fix/summary.txt"
    echo '```'
    echo
    echo -n "[the page](fix/report.html) · [the whole summary](fix/summary.txt)"
    [ -f "$keep/fix/patch.csv" ] && echo -n " · [patch.csv](fix/patch.csv)"
    echo " · [what the terminal showed](fix/terminal.txt)"
  } > "$keep/README.md"
}

entry tutorial_seeds examples/fresh/keras3_tutorial_seeds.py \
  "A Keras 3 fit seeded the tutorials' way (np.random.seed + tf.random.set_seed): two fresh runs start from other weights. The fresh-process check finds it (kind init), the cause by experiment (Python's random), the line to add; fix ends on two fresh runs agreeing."
entry set_vocabulary examples/fresh/set_vocabulary.py \
  "A vocabulary built from a Python set: token ids follow the hash seed, so every batch differs between processes. The cause by experiment (PYTHONHASHSEED) and the line where the set is iterated; fix sets PYTHONHASHSEED."
entry embedding_sgd examples/embedding_sgd.py \
  "A CPU race: the SGD update of an Embedding adds duplicate rows from several threads. Named at its op, confirmed alone with a reproducer; fix patches it and verify times the patch."
entry fit_epochs examples/fit_epochs.py \
  "model.fit over two epochs, traced across steps: the first differing step, and fit against opbisect's replay." --steps 2
