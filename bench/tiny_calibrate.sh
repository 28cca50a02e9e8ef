#!/usr/bin/env bash
# Calibrate the tiny model's policies on the calib split (pask calibrate, seed 0) into OUT's folder
# (runs/calibration-NAME/ by default; SHIP=1 then copies the per-budget policies NAME.b<b>.json into
# policies/ and the record, report and plots into the notebook, experiments/policies/), timed, then calibrate again with the same seed into REPEAT and compare every policy byte for
# byte. Writes RESULTS/meta.txt (command, commit, wall time of each run, sha256 of every policy,
# and whether the two runs match). The eval split is never touched.
#   bash bench/tiny_calibrate.sh              # ~25 min per run on 2 cores
#   REPEAT= bash bench/tiny_calibrate.sh      # skip the determinism run
#   REPEAT_ONLY=1 ...                         # the policies in OUT's place are the first run (shipped,
#                                             # untouched); only the repeat runs and is compared with them
#                                             # (give RESULTS another folder: meta.txt is rewritten);
#                                             # REPEAT_ONLY=compare: compare the files already in REPEAT
#   # a repeat at another commit differs in the policies' provenance lines only (tool_version, date): said so
#   # the segment policy (issue 13): searched with the tools block compressed alone, own tokens kept
#   OUT=experiments/policies/pask-tiny-fc.segment.json BUDGETS=0.33 EXTRA="--segment system --own-budget 1 --baseline snapkv:per_head=false" \
#     RESULTS=experiments/results/pask-tiny-fc-calibration-segment bash bench/tiny_calibrate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
given=""  # the command as run: the variables it was given (before the defaults below)
for v in MODEL DATA OUT REPEAT RESULTS BUDGETS RESUME REPEAT_ONLY; do [[ -n "${!v+x}" ]] && given+="$v=\"${!v}\" "; done
MODEL=${MODEL:-models/pask-tiny-fc}
NAME=$(basename "$MODEL")
DATA=${DATA:-synthetic:calib:300:tiny}
OUT=${OUT:-runs/calibration-$NAME/$NAME.json}
REPEAT=${REPEAT-runs/calibrate-repeat-$NAME}
RESULTS=${RESULTS:-bench/results/$NAME-calibration}
BUDGETS=${BUDGETS:-0.5,0.33,0.2}
read -r -a extra <<< "${EXTRA:-}"
ARGS=(--model "$MODEL" --data "$DATA" --groups 2 --budgets "$BUDGETS" --schedule prefill --seed 0
      --fit-n 200 --probe-n 40 "${extra[@]}")
mkdir -p "$RESULTS" "$(dirname "$OUT")"
stem=${OUT%.json}
# a fresh run: no resumed phases, so the wall time is the whole cost (RESUME=1: continue the record)
SECONDS=0
if [[ -z "${REPEAT_ONLY:-}" ]]; then
  [[ -n "${RESUME:-}" ]] || rm -f "$stem.calibration.json"
  .venv/bin/pask calibrate "${ARGS[@]}" --out "$OUT"
elif [[ -z "$REPEAT" ]]; then
  echo "REPEAT_ONLY needs a REPEAT folder" >&2; exit 2
fi
first=$SECONDS
policies=("$OUT" "$stem".b*.json)
lines=("command: $given${EXTRA:+EXTRA=\"$EXTRA\" }bash bench/tiny_calibrate.sh" "calibrate: pask calibrate ${ARGS[*]} --out $OUT"
       "commit: $(git rev-parse HEAD)$(git status --porcelain --untracked-files=no -- python | grep -q . && echo -dirty || true)"
       "wall (${REPEAT_ONLY:+first run not run: the files in place, }${RESUME:+resumed; }first run${RESUME:-, fresh}): ${first}s")
for p in "${policies[@]}"; do lines+=("sha256 $(sha256sum "$p" | cut -c1-64) $p"); done
# a policy's provenance lines: the code version that wrote it (a repeat at another commit differs there only)
PROVENANCE='^ *"\(tool_version\|date\)": '
if [[ -n "$REPEAT" ]]; then
  if [[ "${REPEAT_ONLY:-}" == compare ]]; then  # the repeat's files are in REPEAT already: compare only
    lines+=("repeat run: not run here, its files in $REPEAT")
  else
    rm -rf "$REPEAT" && mkdir -p "$REPEAT"
    SECONDS=0
    .venv/bin/pask calibrate "${ARGS[@]}" --out "$REPEAT/$(basename "$OUT")"
    lines+=("wall (repeat run): ${SECONDS}s")
  fi
  same=yes
  for p in "${policies[@]}"; do
    if cmp -s "$p" "$REPEAT/$(basename "$p")"; then lines+=("identical: $(basename "$p")")
    elif cmp -s <(grep -v "$PROVENANCE" "$p") <(grep -v "$PROVENANCE" "$REPEAT/$(basename "$p")"); then
      lines+=("identical but for the provenance (the code version that wrote it: tool_version, date): $(basename "$p")")
      same=provenance
    else lines+=("DIFFERENT: $(basename "$p")"); same=no; fi
  done
  lines+=("byte-identical policies across the two runs: $same")
fi
printf '%s\n' "${lines[@]}" | tee "$RESULTS/meta.txt"
if [[ "${SHIP:-0}" == 1 ]]; then  # the shipped set: one file per budget (policies/), the record beside the notebook's
  cp "$stem".b*.json policies/
  cp "$stem".calibration.{json,md} "$stem".{S,D}.png experiments/policies/ 2>/dev/null || true
fi
