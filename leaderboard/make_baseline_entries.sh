#!/usr/bin/env bash
# Re-generate the committed baseline entries from real runs, then re-render the leaderboard.
#
#   leaderboard/make_baseline_entries.sh            # evaluate every baseline, submit, verify, render
#   REUSE_RUNS=1 leaderboard/make_baseline_entries.sh   # keep runs/leaderboard/*/results.json already there
#   JOIN=913987fb leaderboard/make_baseline_entries.sh  # verify each on that round's shared draw (round --join)
#   INVERSION=1 VICTIMS=reinforce_convdepth JOIN=913987fb leaderboard/make_baseline_entries.sh  # one victim's entries
#
# Every entry is made on the official split (the split identity envs/splits/v0.json records), binds its
# attack and defense to built-in code by name, and ships the run's per-episode rows; `submit` refuses anything
# else. The re-verification of every entry is a test: tests/test_leaderboard.py::test_every_committed_entry_reverifies.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -x .venv/bin/python ]]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python}; fi
GB=("$PY" -m gradleak_bench.cli)
RUNS=${RUNS:-runs/leaderboard}
ENTRIES=${ENTRIES:-leaderboard/entries}
AUTHORS=${AUTHORS:-gradleak-bench maintainers}
read -r -a SUBMIT_EXTRA <<< "${SUBMIT_FLAGS:-}"
# Optional links (e.g. PAPER_URL=https://... CODE_URL=https://...); none is recorded by default.
LINKS=()
[[ -n "${PAPER_URL:-}" ]] && LINKS+=(--paper "$PAPER_URL")
[[ -n "${CODE_URL:-}" ]] && LINKS+=(--code "$CODE_URL")

# attack task victim checkpoint defense [defense params...]
BASELINES=(
  "closed_form PointNav ppo init none"
  "closed_form PointNav ppo trained none"
  "closed_form PointNav a2c init none"
  "closed_form PointNav a2c trained none"
  "closed_form ActivePerception dqn init none"
  "closed_form ActivePerception dqn trained none"
  "closed_form ActivePerception reinforce init none"
  "closed_form ActivePerception reinforce_convdepth init none"
  "closed_form ActivePerception reinforce_convdepth trained none"
  "closed_form PointNav ppo init topk -D keep=0.1"
  "closed_form PointNav ppo init gaussian_noise -D sigma=0.01"
  "closed_form PointNav ppo init dp_sgd -D C=1.0 -D sigma=1.0"
  "closed_form PointNav ppo init clip_norm -D C=1.0"
  "closed_form PointNav ppo init quantize -D bits=8"
  "closed_form PointNav ppo init correlated_noise -D sigma=0.01 -D rho=0.9"
  "closed_form PointNav ppo init temporal_mean -D k=4"
)
# The optimisation attacks: INVERSION=1 to include. QGI, RGI and IG at their quick presets (about 30 CPU-minutes
# in all); DLG and iDLG at their source budget, 300 L-BFGS iterations (the `paper` preset, as the DLG baseline of
# the TRACE code runs), which costs 4.0 s (DLG) and 5.9 s (iDLG) per frame on one thread at load 5-6: about
# 26 + 39 minutes for the two 48-episode entries and 13 + 20 minutes for their verification (docs/inversion-attacks.md).
# The PointNav ones also score LPIPS (-M names their fields, which keeps the default metrics, plus rgb_lpips).
if [[ "${INVERSION:-0}" == 1 ]]; then
  BASELINES+=(
    "qgi ActivePerception dqn init none"
    "qgi ActivePerception dqn trained none"
    "rgi ActivePerception reinforce init none"
    "rgi ActivePerception reinforce_convdepth init none"
    "rgi ActivePerception reinforce_convdepth trained none"
    "inverting_gradients PointNav ppo init none -M action -M rgb -M rgb_lpips"
    "idlg PointNav ppo init none -A preset=paper -M action -M rgb -M rgb_lpips"
    "dlg PointNav ppo init none -A preset=paper -M action -M rgb -M rgb_lpips"
  )
fi

# ONLY="dp_sgd clip_norm": just the baselines whose defense is named (a partial refresh)
for spec in "${BASELINES[@]}"; do
  if [[ -n "${ONLY:-}" && " ${ONLY} " != *" $(awk '{print $5}' <<< "$spec") "* ]]; then continue; fi
  # ATTACKS="dlg idlg": just the baselines of these attacks (INVERSION=1 ATTACKS="dlg idlg" re-runs issue 40's)
  if [[ -n "${ATTACKS:-}" && " ${ATTACKS} " != *" $(awk '{print $1}' <<< "$spec") "* ]]; then continue; fi
  # VICTIMS="reinforce_convdepth": just the baselines on these victims (a newly published victim's entries)
  if [[ -n "${VICTIMS:-}" && " ${VICTIMS} " != *" $(awk '{print $3}' <<< "$spec") "* ]]; then continue; fi
  read -r -a args <<< "$spec"
  attack=${args[0]} task=${args[1]} victim=${args[2]} checkpoint=${args[3]} defense=${args[4]}
  run="$RUNS/${attack}__$task-$victim-$checkpoint-$defense"
  if [[ "${REUSE_RUNS:-0}" != 1 || ! -f "$run/results.json" ]]; then
    "${GB[@]}" evaluate "$attack" --task "$task" --victim "$victim" --checkpoint "$checkpoint" --defense "$defense" \
      "${args[@]:5}" --seed 0 --wandb disabled --out "$run"
  fi
  "${GB[@]}" submit "$run" --name "$attack" --authors "$AUTHORS" ${LINKS[@]+"${LINKS[@]}"} --out "$ENTRIES" --force \
    ${SUBMIT_EXTRA[@]+"${SUBMIT_EXTRA[@]}"}
  # ranked only once verified on fresh layouts: writes leaderboard/verified/<the entry's path>. JOIN=ROUND (a
  # finished round's commitment) verifies it on that round's shared draw instead, so the board pairs it with the
  # round's other entries (`gradleak-bench round --join`; built-in attacks and defenses only), and verifies once.
  if [[ -n "${JOIN:-}" ]]; then
    "${GB[@]}" round --entries "$ENTRIES" --join "$JOIN" --only "$task/$defense/${attack}__$victim-$checkpoint.json"
  else
    "${GB[@]}" verify "$ENTRIES/$task/$defense/${attack}__$victim-$checkpoint.json"
  fi
done

"${GB[@]}" leaderboard --entries "$ENTRIES"
