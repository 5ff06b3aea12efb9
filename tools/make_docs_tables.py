"""Render every table in docs/ that has a committed source file, from that file, into its marked place.

A docs table with a source sits between ``<!-- table: NAME -->`` and ``<!-- /table -->``; :data:`TABLES` maps
NAME to the doc, the source files (JSON under ``benchmarks/results/`` or ``docs/data/``) and the function that
renders them. ``tests/test_docs_tables.py`` re-renders every table and compares, so a number in a marked
table cannot drift from its file. Sources are read with ``json.loads`` only; nothing in them is called.

Usage:
    python tools/make_docs_tables.py          # rewrite the marked tables in place
    python tools/make_docs_tables.py --check  # exit 1 naming every table that differs from its source
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- table: (?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- /table -->", re.S)


@dataclass(frozen=True)
class Table:
    doc: str
    sources: tuple[str, ...]
    render: Callable[..., str]


def load(path: str) -> Any:
    return json.loads((ROOT / path).read_text())


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def number(value: Any, digits: int) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "--"
    return f"{value:.{digits}f}"


# ------------------------------------------------------------------ inversion attacks (docs/inversion-attacks.md)

INVERSION = "benchmarks/results/inversion_reproduction.json"
PAPER = "docs/data/qgi_rgi_paper.json"
# metric, label, format of one value
TABLE1_ROWS = (
    ("rgb_psnr_y", "RGB PSNR, Y (dB)", "{:.1f}"), ("rgb_ssim_y", "RGB SSIM, Y", "{:.2f}"),
    ("depth_psnr", "depth PSNR (dB, range 10 m)", "{:.1f}"), ("depth_ssim", "depth SSIM", "{:.2f}"),
    ("bbox_iou", "target box IoU", "{:.2f}"), ("action_accuracy", "action accuracy", "{:.0%}"),
    ("q_value_rel_error", "predicted Q error (%)", "sig"), ("q_target_rel_error", "target Q error (%)", "sig"),
    ("return_abs_error", "return abs. error", "sig"),
)


def _fmt(fmt: str, value: float) -> str:
    """``fmt.format(value)``; ``"sig"``: three significant digits from 1 up, two below (errors near 0)."""
    if fmt != "sig":
        return fmt.format(value)
    return f"{value:.3g}" if abs(value) >= 1 else f"{value:.2g}"


def _cell(metric: dict | None, fmt: str, ci: bool = True) -> str:
    if metric is None:
        return "--"
    mean, control = metric.get("mean"), metric.get("control")
    if not isinstance(mean, (int, float)):
        return "--"
    text = "100 (capped)" if fmt == "{:.1f}" and mean >= 100 else _fmt(fmt, mean)
    low, high = (metric.get("ci") or [None, None])[:2]
    if ci and isinstance(low, (int, float)) and isinstance(high, (int, float)) and _fmt(fmt, low) != _fmt(fmt, high):
        text += f" [{_fmt(fmt, low)}, {_fmt(fmt, high)}]"
    if isinstance(control, (int, float)):
        text += f" (ctl {_fmt(fmt, control)})"
    return text


def inversion_table1(runs: dict, paper: dict) -> str:
    runs = runs["runs"]
    columns = [("paper QGI (S1)", paper["QGI"]), ("ours QGI, Adam stage 1", runs["qgi12"]),
               ("ours QGI, closed-form stage 1", runs["qgi12_cf"]), ("paper RGI (S1)", paper["RGI"]),
               ("ours RGI, Adam stage 1", runs["rgi12"]), ("ours RGI, closed-form stage 1", runs["rgi12_cf"])]
    rows = []
    for metric, label, fmt in TABLE1_ROWS:
        row = [label]
        for _, source in columns:
            if "metrics" in source:
                row.append(_cell(source["metrics"].get(metric), fmt))
            else:
                row.append(str(source.get(metric, "--")))
        rows.append(row)
    rows.append(["frames / failed"] + [str(s.get("n_frames", "--")) if "metrics" not in s
                                        else f"{s['n_frames']} / {s['n_failed']}" for _, s in columns])
    rows.append(["attack ms per frame (1 thread)"] + [
        "--" if "metrics" not in s else number(s.get("ms_per_frame"), 0) for _, s in columns])
    return markdown(["metric (paper protocol)"] + [c for c, _ in columns], rows)


ABLATION = (("qgi", "QGI (surrogate, two-stage, Adam)", "--"),
            ("qgi_cf", "QGI, closed-form stage 1", "`-A linear_solver=closed_form`"),
            ("qgi_original", "original objective (rule action, TD target optimised jointly, cosine) = paper's "
                             "\"based on inverting\"", "`-A objective=original`"),
            ("qgi_joint", "joint optimisation of box, depth, RGB", "`-A stages=joint`"),
            ("ig_dqn", "`inverting_gradients` (quick)", "--"), ("idlg_dqn", "`idlg` (quick)", "--"),
            ("dlg_dqn", "`dlg` (quick)", "--"))


def inversion_ablation(runs: dict) -> str:
    runs = runs["runs"]
    rows = []
    for key, label, flags in ABLATION:
        m = runs[key]["metrics"]
        cells = [_cell(m.get(metric), fmt, False) for metric, fmt in (
            ("rgb_psnr_y", "{:.1f}"), ("depth_psnr", "{:.1f}"), ("bbox_iou", "{:.2f}"), ("action_accuracy", "{:.0%}"),
            ("q_value_rel_error", "sig"), ("q_target_rel_error", "sig"))]
        rows.append([label, flags, *cells])
    return markdown(["variant", "command flags", "RGB Y PSNR", "depth PSNR", "box IoU", "action accuracy",
                     "predicted Q error %", "target Q error %"], rows)


INVERSION_SPEED = "benchmarks/results/inversion.json"


def inversion_speed(data: dict) -> str:
    rows = []
    for name, a in data["attacks"].items():
        if "iterations_per_s" in a:
            rate = f"{a['iterations_per_s']:.3g}"
        else:
            rate = f"{a['stage1_iterations_per_s']:.3g} (stage 1) / {a['stage2_iterations_per_s']:.3g} (stage 2)"
        batching = a.get("batching")
        speedup = ("--" if not batching else f"{batching['speedup']:.2f}x ({batching['looped_s']:.2f} s looped vs "
                   f"{batching['batched_s']:.2f} s batched)")
        rows.append([f"`{name}`", f"`{a['victim']}`", rate, f"{a['s_per_frame']['quick']:.2f}",
                     f"{a['s_per_frame']['paper']:.1f}", speedup])
    return markdown(["attack", "victim", "iterations / s (8 frames)", "s / frame, quick",
                     "s / frame, paper (extrapolated)", "batching speed-up (8 frames, 25 iterations)"], rows)


# budget curves (benchmarks/budget_curves.py): one run per frame at the source budget, checkpoints along it
BUDGET_CURVES = tuple(f"docs/data/budget_curves/{name}.json" for name in ("inverting_gradients", "dlg", "idlg", "qgi",
                                                                           "rgi")
                      if (ROOT / f"docs/data/budget_curves/{name}.json").is_file())
BUDGET_COLUMNS = (("rgb_psnr", 1), ("rgb_ssim", 2), ("depth_psnr", 1))


def _with_ci(p: dict, digits: int) -> str:
    return f"{number(p['mean'], digits)} [{number(p['ci_low'], digits)}, {number(p['ci_high'], digits)}]"


def _leak(p: dict, digits: int) -> str:
    leak = p.get("leakage") or {}
    if not leak:
        return "--"
    sign = lambda v: ("+" if isinstance(v, (int, float)) and v > 0 else "") + number(v, digits)  # noqa: E731
    return f"{sign(leak['mean'])} [{sign(leak['ci_low'])}, {sign(leak['ci_high'])}]"


def budget_curves(*runs: dict) -> str:
    rows = []
    for run in runs:
        summary, cfg = run["summary"], run["config"]
        first = summary[BUDGET_COLUMNS[0][0]]["curve"]
        for i, point in enumerate(first):
            if point["iterations"] is None:
                own = f" (= {cfg['quick_checkpoint']})" if cfg["quick_checkpoint"] else " (own run)"
                budget = "quick preset" + own
            elif cfg["snapshot_offset"]:
                budget = f"{cfg['snapshot_offset']:,} + {point['iterations'] - cfg['snapshot_offset']:,}"
            else:
                budget = f"{point['iterations']:,}"
            row = [f"`{cfg['attack']}`" if i == 0 else "", str(len(run["frames"])) if i == 0 else "", budget]
            for metric, digits in BUDGET_COLUMNS:
                p = summary[metric]["curve"][i] if metric in summary else None
                row += ["--", "--"] if p is None else [_with_ci(p, digits), _leak(p, digits)]
            rows.append(row)
    header = ["attack", "frames", "iterations"]
    for metric, _ in BUDGET_COLUMNS:
        header += [f"{metric}", f"{metric} - best prior"]
    return markdown(header, rows)


def budget_costs(*runs: dict) -> str:
    rows = []
    for run in runs:
        cfg, units = run["config"], run["units"]
        loads = [u["machine_before"]["load_average"][0] for u in units] + [u["machine_after"]["load_average"][0]
                                                                           for u in units]
        settings = run["settings"]["paper"]
        budget = (f"{settings['stage1']:,} + {settings['stage2']:,}" if "stage1" in settings
                  else f"{settings['iterations']:,}")
        rows.append([f"`{cfg['attack']}`", f"`{cfg['victim']}`", budget, str(len(run["frames"])),
                     number(run["paper_wall_s_per_frame"], 1), number(run["paper_cpu_s_per_frame"], 1),
                     number(run["wall_s_total"] / 60, 1), number(run["cpu_s_total"] / 60, 1),
                     f"{min(loads):.1f}-{max(loads):.1f}", str(run["threads"])])
    return markdown(["attack", "victim", "paper budget", "frames", "wall s / frame", "CPU s / frame",
                     "wall min, all (paper + quick)", "CPU min, all", "load average (1 min)", "threads"], rows)


BUDGET_FRAMES = tuple(f"docs/data/budget_curves/{name}.json" for name in ("qgi", "rgi")
                      if (ROOT / f"docs/data/budget_curves/{name}.json").is_file())
SOLVED_DEPTH_DB = 60.0  # a depth PSNR this high means stage 1 recovered the linear part (depth enters it verbatim)


def budget_frames(*runs: dict) -> str:
    """Per frame at the paper budget: RGB and depth at the end of the run, beside the `quick` run on the same
    frame and the best prior (the run's, per frame); whether stage 1 solved the first layer."""
    rows = []
    for run in runs:
        # each metric's best prior at the paper budget (the last checkpoint with an iteration count)
        best = {metric: [p for p in run["summary"][metric]["curve"] if p["iterations"] is not None][-1]["best_prior"]
                for metric in ("rgb_psnr", "depth_psnr")}
        for f in run["frames"]:
            final, quick = f["final"], f["quick"]
            rgb_prior, depth_prior = f["priors"][best["rgb_psnr"]]["rgb_psnr"], f["priors"][best["depth_psnr"]]["depth_psnr"]
            rows.append([f"`{run['config']['attack']}`", f["frame"], number(final["rgb_psnr"], 1),
                         f"{final['rgb_psnr'] - rgb_prior:+.1f}", number(quick["rgb_psnr"], 1),
                         number(final["depth_psnr"], 1), number(depth_prior, 1),
                         "yes" if final["depth_psnr"] >= SOLVED_DEPTH_DB else "no"])
        solved = sum(1 for f in run["frames"] if f["final"]["depth_psnr"] >= SOLVED_DEPTH_DB)
        rows.append([f"`{run['config']['attack']}`", f"**{solved} of {len(run['frames'])} solved**",
                     f"best prior: {best['rgb_psnr'].removeprefix('prior:')}", "", "",
                     "", f"best prior: {best['depth_psnr'].removeprefix('prior:')}", ""])
    return markdown(["attack", "frame (episode@step)", "RGB PSNR, paper budget", "- best prior (same frame)",
                     "RGB PSNR, quick run", "depth PSNR, paper budget", "depth PSNR, best prior",
                     f"stage 1 solved (depth >= {SOLVED_DEPTH_DB:.0f} dB)"], rows)


IG_REFERENCE = "benchmarks/results/ig_reference.json"


def ig_reference(data: dict) -> str:
    rows = []
    for name, case in data["cases"].items():
        frames = case["frames"]
        if not frames:
            continue
        mean = lambda key: sum(f[key] for f in frames) / len(frames)  # noqa: E731
        control = (number(sum(f["self_mean_abs_diff_unit"] for f in frames) / len(frames), 3)
                   if all("self_mean_abs_diff_unit" in f for f in frames) else "--")
        ours = sum(f["ours"]["rgb_psnr"] for f in frames) / len(frames)
        theirs = sum(f["breaching_final"]["rgb_psnr"] for f in frames) / len(frames)
        returned = sum(f["breaching_returned"]["rgb_psnr"] for f in frames) / len(frames)
        rows.append([f"`{name}`", f"{case['iterations']:,}", number(case["tv"], 1), "yes" if case["signed"] else "no",
                     str(len(frames)), f"{max(f['max_abs_diff_unit'] for f in frames):.2g}",
                     f"{mean('mean_abs_diff_unit'):.2g}", control, number(ours, 2), number(theirs, 2),
                     f"{ours - theirs:+.2f}", number(returned, 2),
                     number(mean("ours_cpu_s"), 1), number(mean("breaching_cpu_s"), 1)])
    return markdown(["case", "iterations", "TV", "signed", "frames", "max abs pixel diff", "mean abs pixel diff",
                     "control: ours vs ours, gradient x (1 + 1e-6 noise)", "RGB PSNR ours", "RGB PSNR breaching",
                     "diff", "breaching's returned (lowest-loss) iterate", "CPU s / frame ours",
                     "CPU s / frame breaching"], rows)


def ig_reference_loss(data: dict) -> str:
    rows = [[a["frame"], str(a["points"]), f"{a['max_loss_abs_diff']:.1e}", f"{a['max_grad_rel_l2_diff']:.1e}",
             f"{a['max_grad_rel_l2_diff_ours_vs_float64']:.1e}", f"{a['max_grad_rel_l2_diff_breaching_vs_float64']:.1e}",
             f"{a['max_grad_sign_disagreement']:.2%}", f"{a['max_grad_sign_disagreement_large']:.3%}"]
            for a in data.get("loss_agreement", [])]
    return markdown(["frame", "images", "loss, abs. diff", "image gradient, rel. L2: ours vs breaching",
                     "ours vs float64", "breaching vs float64", "pixels with opposite gradient sign",
                     "... among components > 1e-3 max"], rows)


# ------------------------------------------------------------------ TSP (docs/tsp.md)

TSP = "benchmarks/results/tsp_eval.json"
TSP_COLUMNS = (("action_accuracy", "actions"), ("ate", "ATE"), ("ate_aligned", "ATE aligned"),
               ("hausdorff", "Hausdorff"), ("hausdorff_aligned", "Hausdorff aligned"),
               ("frechet_aligned", "Frechet aligned"), ("dtw_error_aligned", "DTW aligned"),
               ("keypoint_hit_rate_aligned", "key points aligned"), ("room_sequence_accuracy_aligned", "rooms aligned"))


def tsp_results(table: dict) -> str:
    rows = []
    for label, run in table.items():
        cells = []
        for metric, _ in TSP_COLUMNS:
            m = run["metrics"].get(metric)
            control = (m or {}).get("control") or {}
            cells.append("--" if m is None else f"{number(m.get('mean'), 2)} ({number(control.get('mean'), 2)})")
        rows.append([label, *cells, number(run.get("ms_per_frame"), 1), number(run.get("fit_seconds"), 0)])
    return markdown(["run", *(label for _, label in TSP_COLUMNS), "ms/step", "fit s"], rows)


# ------------------------------------------------------------------ TRACE (docs/trace.md)

TRACE_STEPS = "docs/trace_per_timestep.json"


def trace_per_timestep(data: dict) -> str:
    rows = []
    for victim, attacks in data.items():
        for attack, curve in attacks.items():
            name = "`trace` control" if attack == "trace_control" else f"`{attack}`"
            rows.append([victim.upper(), name, *(number(v, 2) for v in curve["mean"])])
    steps = max(len(curve["mean"]) for attacks in data.values() for curve in attacks.values())
    return markdown(["victim", "attack", "t=1", *(str(t) for t in range(2, steps + 1))], rows)


TRACE_ADAPTIVE = "docs/data/trace_adaptive.json"


def trace_adaptive(data: dict) -> str:
    """Per defense: RGB PSNR and action accuracy of the non-adaptive and the adaptive attacker, the best prior
    and each one's leakage over it, and the paper's claim for that defense family."""
    cells, claims = data["cells"], data["paper_claims"]
    rows = []
    for defense in data["defenses"]:
        setting = " ".join(data["defense_args"][defense])
        for adaptive in (False, True):
            cell = cells.get(f"{defense}/{'adaptive' if adaptive else 'non-adaptive'}")
            if cell is None:
                continue
            psnr, action = cell["metrics"].get("rgb_psnr", {}), cell["metrics"].get("action_accuracy", {})
            best = psnr.get("best_prior")
            rows.append([f"`{setting}`", "adaptive" if adaptive else "non-adaptive", _interval(psnr),
                         f"{best.removeprefix('prior:')} {psnr['best_prior_score']['mean']:.3g}" if best else "--",
                         _interval(psnr.get("prior_leakage")) if best else "--", _interval(action),
                         _interval(action.get("prior_leakage")) if action.get("best_prior") else "--",
                         claims.get(defense, "") if not adaptive else ""])
    return markdown(["defense", "attacker", "RGB PSNR dB [95% CI]", "best RGB prior", "RGB leakage vs best prior",
                     "action accuracy", "action leakage vs best prior", "the paper's claim"], rows)


# ------------------------------------------------------------------ split identity (docs/tasks.md)

SPLIT_MARGINS = "benchmarks/results/split_identity_margins.json"
SPLIT_MARGINS_84 = "benchmarks/results/split_identity_margins_ppo_84.json"  # the 84x84 victim's split


def split_identity_margins(data: dict) -> str:
    """Rounding rows: the largest ratio over episodes; change rows: the smallest. ``~0``: below 0.001, the
    field is not changed by that change (what remains is the record's 9-digit rounding of the sketch)."""
    fields = sorted({f for row in data["rounding"].values() for f in row["max_ratio"]})

    def cell(value: float | None) -> str:
        if value is None:
            return "--"
        return "~0" if value < 1e-3 else f"{value:.2g}"

    rows = [[f"rounding: {name} (identity {'equal' if row['identity_equal'] else 'DIFFERENT'}, "
             f"{row['bit_identical_episodes']}/{data['sampling_without_replay'][name]['episodes']} episodes "
             "bit-identical)", *(cell(row["max_ratio"].get(f)) for f in fields)]
            for name, row in data["rounding"].items()]
    rows += [[f"change: {name}", *(cell(row["min_ratio"].get(f)) for f in fields)]
             for name, row in data["real_changes"].items()]
    return markdown(["RMS difference / tolerance", *(f"`{f}`" for f in fields)], rows)


TRACE_SPEED = "benchmarks/results/trace.json"
_TRACE_LABELS = {"trace": "`trace` (window 8, key/value cache)",
                 "trace_seq4": "`trace_seq4` (one window per frame, no cache)",
                 "trace_no_temporal": "`trace_no_temporal` (no second pass in scheduled sampling)"}


def trace_speed(data: dict) -> str:
    rows = []
    for name, label in _TRACE_LABELS.items():
        inf, train = data["inference"][name], data["training"][name]
        rows.append([label, f"{inf['ms_per_frame_1_threads']:.1f}", f"{inf['cpu_ms_per_frame_1_threads']:.1f}",
                     f"{inf['feature_ms_per_frame_1_threads']:.1f}",
                     f"{train['teacher_forcing_sequences_per_s_1_thread']:.1f} sequences/s",
                     f"{train['scheduled_sampling_sequences_per_s_1_thread']:.1f} sequences/s"])
    return markdown(["attack", "ms / frame, 1 thread (wall)", "CPU ms / frame, 1 thread",
                     "of which gradient features", "training, teacher forcing", "training, scheduled sampling"], rows)


# ------------------------------------------------------------------ per-sample engine (docs/gradient-stream.md)

PER_SAMPLE_B8 = "benchmarks/results/bench_per_sample_b8.json"
PER_SAMPLE_B64 = "benchmarks/results/bench_per_sample.json"
_PER_SAMPLE_LABELS = {"engine (out=)": "engine, `out=` preallocated",
                      "engine (fresh)": "engine, fresh outputs (default call)",
                      "engine vmap": "engine, `vmap` reference path",
                      "opacus": "Opacus 1.6 `GradSampleModule`",
                      "python loop": "Python loop of single-sample backwards",
                      "batched backward": "one batched backward of the mean loss (floor)"}


def per_sample_speed(b8: dict, b64: dict) -> str:
    rows = []
    for method, label in _PER_SAMPLE_LABELS.items():
        small, large = b8["results"][method], b64["results"][method]
        err = large["max_rel_err_vs_vmap"]
        ratio = f"{large['ratio_to_floor']:.2f}"
        rows.append([label, f"{small['ms']:.1f}", f"{small['ratio_to_floor']:.2f}", f"{large['ms']:.1f}",
                     f"**{ratio}**" if method == "engine (out=)" else ratio, f"{large['peak_rss_growth_mib']:.0f}",
                     "--" if err is None else f"{err:.1e}"])
    setup = b64["setup"]
    return markdown(["method", "batch 8 (one episode): ms", "x floor", "batch 64: ms", "x floor",
                     "peak MiB (batch 64)", "max rel err (batch 64)"], rows) + (
        f"\n{setup['threads']} thread, median of {setup['repeats']}, torch {setup['torch']}, {setup.get('cpu', setup['machine'])}; "
        f"1-minute load average {b8['setup']['load_average_before'][0]:.2f} / {setup['load_average_before'][0]:.2f} "
        f"before the batch 8 / 64 runs.\n")


# ------------------------------------------------------------------ priors and calibrated leakage (docs/priors.md)

PRIORS_PPO_INIT = "docs/data/priors_PointNav_ppo_init.json"
PRIORS_PPO_TRAINED = "docs/data/priors_PointNav_ppo_trained.json"
PRIORS_A2C_TRAINED = "docs/data/priors_PointNav_a2c_trained.json"
IMAGE_AND_ACTION = ("action_accuracy", "rgb_psnr", "rgb_ssim", "rgb_psnr_y", "rgb_ssim_y", "rgb_ssim@gauss11",
                    "rgb_ms_ssim", "depth_psnr", "depth_ssim")


def priors_scores_images(data: dict) -> str:
    return priors_scores(data, IMAGE_AND_ACTION)
CALIBRATED_RUNS = ("docs/data/evaluations/PointNav_ppo_init_closed_form_8.json",
                   "docs/data/evaluations/PointNav_ppo_init_inverting_gradients_quick_8.json")
CALIBRATED_QGI = ("docs/data/evaluations/ActivePerception_dqn_init_qgi_closed_form_8.json",)


def _interval(m: dict | None, digits: int = 3) -> str:
    if not isinstance(m, dict) or not isinstance(m.get("mean"), (int, float)):
        return "--"
    return f"{m['mean']:.{digits}g} [{m['ci_low']:.{digits}g}, {m['ci_high']:.{digits}g}]"


def priors_scores(data: dict, only: tuple[str, ...] | None = None) -> str:
    """One row per metric (those in ``only``, when given): the best prior with its CI, then every prior's mean."""
    rows = []
    for metric, entry in data["metrics"].items():
        if only is not None and metric not in only:
            continue
        best = entry["best_prior"]
        others = ", ".join(f"{name.removeprefix('prior:')} {s['mean']:.3g}" for name, s in entry["priors"].items()
                           if name != best and isinstance(s.get("mean"), (int, float)))
        rows.append([f"`{metric}`", "higher" if entry["higher_is_better"] else "lower",
                     best.removeprefix("prior:"), _interval(entry["priors"][best]), others or "--"])
    return markdown(["metric", "better", "best prior", "its score [95% CI]", "the other priors (mean)"], rows)


def priors_cost(data: dict) -> str:
    fit, over = data["fit"], data.get("overhead")
    rows = [["fit, reading or simulating the train episodes (episodes / steps)", f"{fit['fit_seconds']:.1f} s ({fit['n_episodes']} / {fit['n_steps']})"],
            ["load from the cache", f"{1e3 * fit['warm_load_seconds']:.1f} ms"],
            ["apply every prior, per held-out episode", f"{data['apply_ms_per_episode']:.1f} ms"],
            [f"score {data['n_references']} priors x {data['n_metrics']} metrics, per episode (first run on a "
             "dataset; cached after)", f"{data['score_ms_per_episode']:.0f} ms"],
            ["machine", f"{data['machine']['cpus']} cores, load average {data['machine']['load_average']:.1f}, "
                        f"OMP_NUM_THREADS={data['machine']['omp_num_threads']}"]]
    if over:
        med = sorted(over["without_priors_s"])[len(over["without_priors_s"]) // 2]
        rows += [[f"warm `evaluate {over['attack']}` on {over['episodes']} episodes without priors (median of 3)",
                  f"{med:.1f} s"],
                 [f"what the priors add to it: build {len(over['fields'])}-field references, read their cached "
                  "scores, summarise", f"{over['build_references_s']:.2f} + {over['score_references_s']:.2f} + "
                  f"{over['summary_extra_s']:.2f} s = {over['added_s']:.2f} s ({100 * over['overhead']:.1f}%)"],
                 ["the first run with priors on this dataset (their scores computed and cached)",
                  f"{over['first_with_priors_s']:.1f} s"]]
    return markdown(["what", "cost"], rows)


def calibrated_runs(*runs: dict) -> str:
    """Per run and metric: the attack, the best prior, leakage over it (the headline), the swap control."""
    rows = []
    for run in runs:
        for metric, m in run["metrics"].items():
            best = m.get("best_prior")
            rows.append([f"`{run['attack']}`", f"`{metric}`", _interval(m),
                         f"{best.removeprefix('prior:')} {m['references'][best]['mean']:.3g}" if best else "--",
                         _interval(m.get("prior_leakage")) if best else "--", _interval(m.get("control")),
                         _interval(m.get("leakage"))])
    return markdown(["attack", "metric", "attack [95% CI]", "best prior", "leakage vs best prior [95% CI]",
                     "swap control", "leakage vs control"], rows)


# ------------------------------------------------------------------ closed-form margin (docs/closed-form.md)

MARGIN = "benchmarks/results/closed_form_margin.json"


def closed_form_margin(data: dict) -> str:
    """Rows (checkpoint, beta) in file order; per entropy coefficient the sign-free / signed accuracy."""
    cells: dict[tuple, dict[float, str]] = {}
    entropy: dict[tuple, float] = {}
    for r in data["results"]:
        key = (r["checkpoint"], r["beta"])
        cells.setdefault(key, {})[r["ent_coef"]] = f"{r['accuracy']:.3f} / {r['accuracy_signed']:.3f}"
        entropy.setdefault(key, sum(s["entropy"] for s in r["steps"]) / len(r["steps"]))
    coefs = sorted({c for row in cells.values() for c in row})
    rows = [[checkpoint, f"{beta:g}", f"{entropy[(checkpoint, beta)]:.3f}",
             *(cells[(checkpoint, beta)].get(c, "--") for c in coefs)] for checkpoint, beta in cells]
    return markdown(["checkpoint", "beta", "mean entropy (nats)", *(f"ent_coef {c:g}" for c in coefs)], rows)


# ------------------------------------------------------------------ defenses (docs/defenses.md)

DEFENSES_CLOSED_FORM = "docs/data/defenses_closed_form_PointNav_ppo_init.json"


def defenses_closed_form(table: dict) -> str:
    """One row per defense run: action accuracy, the best prior and the leakage over it, the swap control."""
    rows = []
    for run in table.values():
        m = run["metrics"]["action_accuracy"]
        best = m.get("best_prior")
        params = " ".join(run["params"])
        if run.get("defense_epsilon") is not None:
            params += f" (epsilon {run['defense_epsilon']:.3g} per step)"
        rows.append([f"`{run['defense']}`", f"`{params}`" if params else "", _interval(m),
                     f"{best.removeprefix('prior:')} {m['references'][best]['mean']:.3g}" if best else "--",
                     _interval(m.get("prior_leakage")) if best else "--", _interval(m.get("control")),
                     _interval(m.get("leakage"))])
    return markdown(["defense", "`-D`", "action accuracy [95% CI]", "best prior", "leakage vs best prior",
                     "swap control", "leakage vs control"], rows)


# ------------------------------------------------------------------ headline reruns (benchmarks/headline_leakage.py)

HEADLINE_DIR = "docs/data/headline"


def headline(*names: str) -> tuple[str, ...]:
    return tuple(f"{HEADLINE_DIR}/{name}.json" for name in names)


def oriented(m: dict, key: str) -> tuple[float, float, float] | None:
    """``m[key]`` (an interval) oriented so that larger means more leaked; None when absent."""
    value = m.get(key)
    if not isinstance(value, dict) or not isinstance(value.get("mean"), (int, float)):
        return None
    triple = (value["mean"], value["ci_low"], value["ci_high"])
    return triple if m.get("higher_is_better", True) else (-triple[0], -triple[2], -triple[1])


# fewer scored episodes than this (a metric undefined on most episodes, e.g. IoU over frames with the target
# in view) give a bootstrap CI that says nothing: no verdict
MIN_EPISODES = 5


def verdict(m: dict, n: int | None = None) -> str:
    """Whether the gradient gave more than the best prior: the CI of the oriented leakage excludes 0 (over
    ``n`` scored episodes, when given)."""
    leak = oriented(m, "prior_leakage")
    if leak is None or not all(math.isfinite(v) for v in leak):
        return "no prior"
    if n is not None and n < MIN_EPISODES:
        return f"too few episodes ({n})"
    if leak[1] > 0:
        return "**leaks**"
    return "below prior" if leak[2] < 0 else "no leak (CI spans 0)"


def _run_label(run: dict) -> str:
    params = " ".join(f"{k}={v}" for k, v in run.get("attack_params", {}).items() if k != "preset")
    return f"`{run['attack']}`" + (f" ({params})" if params else "")


def _best(m: dict) -> str:
    best = m.get("best_prior")
    return f"{best.removeprefix('prior:')} {m['best_prior_score']['mean']:.3g}" if best else "--"


def scored_episodes(run: dict, metric: str) -> int:
    """Episodes with a finite value of ``metric`` (null where it is undefined, e.g. no target in view)."""
    return sum(1 for e in run["episodes"] if e["status"] == "ok"
               and isinstance(e["values"][metric][0], (int, float)) and math.isfinite(e["values"][metric][0]))


def headline_rows(runs: tuple[dict, ...], only: tuple[str, ...] | None, victim: bool = True) -> list[list[str]]:
    rows = []
    for run in runs:
        for metric, m in run["metrics"].items():
            if only is not None and metric not in only:
                continue
            n = scored_episodes(run, metric)
            who = [f"{run['task']}/{run['victim']}/{run['checkpoint']}"] if victim else []
            rows.append([_run_label(run), *who, f"`{metric}`", _interval(m), _best(m),
                         _interval(m.get("prior_leakage")), verdict(m, n), _interval(m.get("control")),
                         _interval(m.get("leakage")), str(n)])
    return rows


HEADLINE_HEADER = ["metric", "attack [95% CI]", "best prior", "leakage vs best prior [95% CI]", "beyond the prior?",
                   "swap control", "leakage vs control", "episodes"]


def headline_table(*runs: dict, only: tuple[str, ...] | None = None) -> str:
    return markdown(["attack", "task/victim/checkpoint", *HEADLINE_HEADER], headline_rows(runs, only))


def headline_conditions(*runs: dict) -> str:
    """How each run was made: the command, budget, wall time, threads and load (the reruns' provenance)."""
    rows = []
    for run in runs:
        load = run["machine_before"]["load_average"][0], run["machine_after"]["load_average"][0]
        rows.append([_run_label(run), f"{run['task']}/{run['victim']}/{run['checkpoint']}", run["split"],
                     str(run["n_episodes"]), run["budget"], f"{run['wall_seconds']:.0f}", str(run["threads"]),
                     f"{load[0]:.1f} / {load[1]:.1f}", "yes" if run["sealed"] else "no"])
    return markdown(["attack", "task/victim/checkpoint", "split", "episodes", "budget", "wall s", "threads",
                     "load before / after (2 cores)", "sealed"], rows)


CLOSED_FORM_RUNS = headline(*(f"closed_form_{task}_{victim}_{ck}"
                               for task, victims in (("PointNav", ("ppo", "a2c", "ppo_compact")),
                                                     ("ActivePerception", ("dqn", "reinforce", "dqn_compact")))
                               for victim in victims for ck in ("init", "trained")))


def headline_closed_form(*runs: dict) -> str:
    rows = [row[1:] for row in headline_rows(runs, ("action_accuracy",))]
    return markdown(["task/victim/checkpoint", *HEADLINE_HEADER], rows)


INVERSION_RUNS = headline("ig_PointNav_ppo_init", "ig_ActivePerception_dqn_init", "dlg_ActivePerception_dqn_init",
                          "idlg_ActivePerception_dqn_init", "qgi_adam_ActivePerception_dqn_init",
                          "qgi_cf_ActivePerception_dqn_init", "rgi_adam_ActivePerception_reinforce_init",
                          "rgi_cf_ActivePerception_reinforce_init")
INVERSION_METRICS = ("action_accuracy", "rgb_psnr", "rgb_psnr_y", "rgb_ssim_y", "depth_psnr", "depth_ssim",
                     "bbox_iou", "bbox_iou@visible", "bbox_detection_rate", "q_value_rel_error",
                     "q_target_rel_error", "return_abs_error")


def headline_inversion(*runs: dict) -> str:
    return headline_table(*runs, only=INVERSION_METRICS)


TRACE_ANALYTIC_RUNS = headline("trace_PointNav_ppo_trained", "trace_PointNav_a2c_trained")  # default (analytic) encoder
TRACE_RUNS = TRACE_ANALYTIC_RUNS + headline("trace_learned_PointNav_ppo_trained")
TRACE_METRICS = ("action_accuracy", "rgb_psnr", "rgb_ssim", "rgb_psnr_y", "rgb_ssim@gauss11", "rgb_ms_ssim")


def headline_trace(*runs: dict) -> str:
    return headline_table(*runs, only=TRACE_METRICS)


TSP_RUNS = headline("tsp_PointNav_ppo_init", "tsp_PointNav_ppo_trained")
TSP_METRICS = ("action_accuracy", "ate", "ate_aligned", "hausdorff", "hausdorff_aligned", "frechet_aligned",
               "dtw_error_aligned", "keypoint_hit_rate", "room_sequence_accuracy", "room_sequence_accuracy_aligned")


def headline_tsp(*runs: dict) -> str:
    return headline_table(*runs, only=TSP_METRICS)


# one column per reconstructed field: the metric that stands for it in the summary
SUMMARY_FIELDS = (("actions", "action_accuracy"), ("RGB PSNR", "rgb_psnr"), ("RGB SSIM", "rgb_ssim"),
                  ("depth PSNR", "depth_psnr"), ("box IoU (visible)", "bbox_iou@visible"),
                  ("Q target", "q_target_rel_error"), ("return", "return_abs_error"),
                  ("trajectory ATE", "ate"), ("path shape (Frechet, aligned)", "frechet_aligned"))


def _short(m: dict | None, n: int) -> str:
    if not isinstance(m, dict) or oriented(m, "prior_leakage") is None:
        return ""
    mean, low, high = oriented(m, "prior_leakage")
    said = verdict(m, n)
    if said.startswith("too few"):
        return said
    mark = {"**leaks**": "**leaks**", "below prior": "below", "no leak (CI spans 0)": "no"}.get(said, "")
    return f"{mark} {mean:+.3g} [{low:+.3g}, {high:+.3g}]"


def headline_summary(*runs: dict) -> str:
    """Which attack leaks which field beyond the best prior: one row per run, one column per field."""
    rows = []
    for run in runs:
        cells = [_short(run["metrics"][metric], scored_episodes(run, metric)) if metric in run["metrics"] else ""
                 for _, metric in SUMMARY_FIELDS]
        rows.append([_run_label(run), f"{run['task']}/{run['victim']}/{run['checkpoint']}", *cells])
    keep = [i for i in range(len(SUMMARY_FIELDS)) if any(row[2 + i] for row in rows)]
    header = ["attack", "task/victim/checkpoint", *(f"{SUMMARY_FIELDS[i][0]} (`{SUMMARY_FIELDS[i][1]}`)" for i in keep)]
    return markdown(header, [row[:2] + [row[2 + i] or "--" for i in keep] for row in rows])


# TRACE's resolution beside ours (benchmarks/headline_leakage.py --group resolution): each 84x84 run after its
# 64x64 counterpart, every victim at init, then trained
RESOLUTION_CLOSED_FORM_RUNS = headline("closed_form_PointNav_ppo_init", "closed_form_PointNav_ppo_84_init",
                                       "closed_form_PointNav_a2c_init", "closed_form_PointNav_a2c_84_init",
                                       "closed_form_PointNav_ppo_trained", "closed_form_PointNav_ppo_84_trained",
                                       "closed_form_PointNav_a2c_trained", "closed_form_PointNav_a2c_84_trained")
RESOLUTION_IG_RUNS = headline("ig6_PointNav_ppo_init", "ig6_PointNav_ppo_84_init")
RESOLUTION_IG_METRICS = ("action_accuracy", "rgb_psnr", "rgb_psnr_y", "rgb_ssim_y", "rgb_ssim@gauss11")


def resolution_table(*runs: dict, only: tuple[str, ...] = ("action_accuracy",)) -> str:
    """The headline columns with the camera resolution first, and the attack's time per frame (one thread;
    the load is in each file). Runs recorded before the 84x84 victims existed carry no ``image_size``: they
    were all at 64."""
    rows = []
    for run in runs:
        size = run.get("image_size", 64)
        ms = run.get("ms_per_frame")
        ms = "--" if not isinstance(ms, (int, float)) else f"{ms:.0f}" if ms >= 10 else f"{ms:.2g}"
        load = f"{run['machine_before']['load_average'][0]:.1f}"
        for row in headline_rows((run,), only):
            rows.append([f"{size}x{size}", *row[:-1], f"{row[-1]} ({run['n_frames']} frames)", ms, load])
    return markdown(["resolution", "attack", "task/victim/checkpoint", *HEADLINE_HEADER[:-1], "episodes (frames)",
                     "ms / frame", "load at start (2 cores)"], rows)


def resolution_inversion(*runs: dict) -> str:
    return resolution_table(*runs, only=RESOLUTION_IG_METRICS)


TRACE_84_RUNS = headline("trace_PointNav_ppo_84_trained")  # a2c_84 did not learn its task: no TRACE run on it
RESOLUTION_TRACE_RUNS = headline("trace_PointNav_ppo_trained") + TRACE_84_RUNS


def resolution_trace(*runs: dict) -> str:
    return resolution_table(*runs, only=TRACE_METRICS)


# the headline TRACE cells trained with other attacker seeds (benchmarks/headline_leakage.py --group seeds)
TRACE_SEED_RUNS = headline("trace_PointNav_ppo_trained", *(f"trace_seed{s}_PointNav_ppo_trained" for s in (1, 2, 3, 4)))
TRACE_SEED_RUNS_84 = headline("trace_PointNav_ppo_84_trained",
                              *(f"trace_seed{s}_PointNav_ppo_84_trained" for s in (1, 2)))
SEED_METRICS = ("action_accuracy", "rgb_psnr", "rgb_ssim@gauss11")


def trace_attacker_seeds(*runs: dict) -> str:
    """Per attacker seed: each metric and its leakage over the best prior (CIs over episodes); then, per
    metric, the spread of the seeds' means, which the CIs over episodes do not contain."""
    rows, spread = [], {metric: [] for metric in SEED_METRICS}
    for run in runs:
        seed = int(run["attack_params"].get("seed", 0))
        fit = run.get("fit_seconds")
        cells = []
        for metric in SEED_METRICS:
            m = run["metrics"][metric]
            leak = oriented(m, "prior_leakage")
            spread[metric].append((m["mean"], leak[0]))
            cells += [_interval(m), f"{leak[0]:+.3g} [{leak[1]:+.3g}, {leak[2]:+.3g}]"]
        rows.append([str(seed), *cells, f"{fit / 60:.0f}" if isinstance(fit, (int, float)) else "--",
                     str(run["n_episodes"])])
    summary = ["mean (min-max) over seeds"]
    for metric in SEED_METRICS:
        values, leaks = zip(*spread[metric])
        summary += [f"{sum(values) / len(values):.4g} ({min(values):.4g}-{max(values):.4g})",
                    f"{sum(leaks) / len(leaks):+.3g} ({min(leaks):+.3g} to {max(leaks):+.3g})"]
    rows.append([*summary, "--", "--"])
    header = ["attacker seed"]
    for metric in SEED_METRICS:
        header += [f"`{metric}` [95% CI]", "vs best prior [95% CI]"]
    # per held-out window, how far apart the seeds' RGB PSNRs are (matched by episode id: the same split)
    per_window = [{e["episode_id"]: e["values"]["rgb_psnr"][0] for e in run["episodes"]} for run in runs]
    shared = set.intersection(*(set(w) for w in per_window))
    ranges = [max(w[i] for w in per_window) - min(w[i] for w in per_window) for i in shared]
    return markdown(header + ["fit min", "episodes"], rows) + (
        f"\nPer window, the range of `rgb_psnr` over the {len(runs)} seeds: {statistics.median(ranges):.2f} dB at "
        f"the median window, {max(ranges):.2f} dB at the widest ({len(ranges)} windows).\n")


VICTIM_BEHAVIOUR = "docs/data/victim_behaviour.json"


# the committed validation of every victim (gradleak-bench validate-victim; issue 31), in the zoo's order
VICTIM_ORDER = ("PointNav/ppo", "PointNav/ppo_compact", "PointNav/a2c", "PointNav/ppo_84", "PointNav/a2c_84",
                "ActivePerception/dqn", "ActivePerception/reinforce", "ActivePerception/dqn_compact",
                "PointNavContinuous/ppo_gaussian", "PointNavContinuous/sac")
VICTIM_VALIDATION = tuple(f"envs/checkpoints/{key}/validation.json" for key in VICTIM_ORDER
                          if (ROOT / "envs" / "checkpoints" / key / "validation.json").is_file())


def _validation_cell(row: dict | None) -> str:
    if row is None:
        return "--"
    lo, hi = row["success_ci95"]
    rlo, rhi = row["return_ci95"]
    return (f"{row['success_rate']:.1%} [{lo:.1%}, {hi:.1%}] ({row['successes']}/{row['episodes']}); "
            f"return {row['mean_return']:.2f} [{rlo:.2f}, {rhi:.2f}]")


def victim_validation(*runs: dict) -> str:
    """Per victim: val success (Wilson 95%) and mean return (bootstrap 95%) of the random policy, init and
    trained on the same episodes, and the rule's verdict (gradleak_bench/victims/validation.py)."""
    rows = []
    for run in runs:
        p = run["policies"]
        learned = {True: "**yes**", False: "no"}.get(run.get("learned"), "--")
        rows.append([f"`{run['victim']}`", str(run["episodes"]), *(_validation_cell(p.get(k)) for k in
                                                                    ("random", "init", "trained")), learned])
    return markdown(["victim", "val episodes", "random policy", "init", "trained", "learned"], rows)


def victim_behaviour(data: dict) -> str:
    """Per PointNav victim and checkpoint: success on these val episodes, the policy's mean entropy and mean
    probability of each action at the states it visits (benchmarks/victim_behaviour.py)."""
    names = list(data["rows"][0]["mean_probability"])
    rows = [[f"`{r['victim']}`", r["checkpoint"], f"{r['image_size']}x{r['image_size']}",
             f"{r['success_rate']:.1%} ({r['episodes']})", f"{r['mean_entropy']:.3f}",
             *(f"{r['mean_probability'][a]:.3f}" for a in names)] for r in data["rows"]]
    return markdown(["victim", "checkpoint", "camera", "val success (episodes)",
                     f"mean entropy (uniform {data['rows'][0]['uniform_entropy']:.3f})",
                     *(f"P({a})" for a in names)], rows)


TRACE_PAPER_CURVE = "docs/data/trace_paper_curve.json"


def trace_paper_curve(data: dict) -> str:
    """The paper preset's learning curve (benchmarks/trace_paper_curve.py): the first epoch, every fifth and
    the last, with this process's CPU seconds for the epoch (training and its validation)."""
    history, cpu = data["curve"]["history"], data["cpu_seconds_per_epoch"]
    last = history[-1]["epoch"]
    rows = [[str(h["epoch"]), f"{h['p_scheduled_sampling']:.2f}", f"{h['loss']:.4f}", f"{h['mse']:.4f}",
             f"{h['ce']:.3f}", f"{h['val_psnr_autoregressive']:.2f}", f"{h['val_action_accuracy']:.2f}",
             number(cpu.get(str(h["epoch"])), 0)]
            for h in history if h["epoch"] in (1, last) or h["epoch"] % 5 == 0]
    return markdown(["epoch", "scheduled-sampling probability", "train loss", "train MSE", "train action CE",
                     "val RGB PSNR, autoregressive (dB)", "val action accuracy", "CPU s (epoch)"], rows)


TRACE_PAPER = "docs/data/trace_paper.json"
TRACE_ADAPTIVE_QUICK = "docs/data/trace_adaptive_quick.json"


def trace_vs_paper(paper: dict, speed: dict, adaptive: dict, *runs: dict) -> str:
    """Each headline claim of the TRACE paper beside our measurement of the same quantity: the undefended
    runs per victim and resolution (quick budget, whole official trace-windows split), the per-frame time,
    and the defended cells of the quick-budget adaptive comparison (non-adaptive and adaptive attacker)."""
    claims, rows = paper["claims"], []

    def row(claim: str, setting: str, m: dict | None, n: str) -> list[str]:
        m = m or {}
        best = _best(m) if m.get("best_prior") else "--"
        return [claims[claim]["label"], claims[claim]["paper"], setting, _interval(m), best,
                _interval(m.get("prior_leakage")) if m.get("best_prior") else "--", n]

    for metric in ("rgb_psnr", "action_accuracy"):
        for run in runs:
            size = run.get("image_size", 64)
            rows.append(row(metric, f"{run['victim']} {run['checkpoint']}, {size}x{size}, {run['budget']}",
                            run["metrics"].get(metric), str(run["n_episodes"])))
    ms = speed["inference"]["trace"]
    rows.append([claims["ms_per_frame"]["label"], claims["ms_per_frame"]["paper"],
                 "`trace`, window 8, one CPU thread (`benchmarks/bench_trace.py`)",
                 f"{ms['ms_per_frame_1_threads']:.1f} ms wall, {ms['cpu_ms_per_frame_1_threads']:.1f} ms CPU",
                 "--", "--", "--"])
    cells = adaptive["cells"]
    for defense, claim in (("topk", "topk"), ("quantize", "quantize"), ("gaussian_noise", "gaussian_noise"),
                           ("gaussian_noise_strong", "gaussian_noise"), ("dp_sgd", "dp_sgd")):
        setting = " ".join(adaptive["defense_args"].get(defense, ()))
        for who in ("non-adaptive", "adaptive"):
            cell = cells.get(f"{defense}/{who}")
            if cell is None:
                continue
            for metric in ("action_accuracy", "rgb_psnr"):
                rows.append(row(claim, f"`{setting}`, {who}, {metric}, ppo trained 64x64, quick",
                                cell["metrics"].get(metric), str(cell["n_episodes"])))
    return markdown(["claim", "the paper", "ours: setting", "ours [95% CI]", "best prior",
                     "ours - best prior [95% CI]", "episodes"], rows)


ALL_RUNS = (CLOSED_FORM_RUNS + INVERSION_RUNS + TRACE_RUNS + TSP_RUNS
            + tuple(r for r in RESOLUTION_CLOSED_FORM_RUNS + RESOLUTION_IG_RUNS if r not in CLOSED_FORM_RUNS)
            + TRACE_84_RUNS)


GRID_POINTNAV = "docs/data/grid_pointnav_closed_form.json"
GRID_AP = "docs/data/grid_ap_frontier.json"


def _grid_cell(cells: dict, key: tuple, metric: str) -> list[str]:
    """Metric, leakage over the best prior [CI] and over the swap control, for one grid cell."""
    cell = cells.get(key)
    if cell is None or cell["status"] != "ok":
        mark = "-" if cell is not None and cell["status"] == "skipped" else "x"
        return [mark, mark, mark]
    m = cell["metrics"].get(metric)
    if m is None:
        return ["--", "--", "--"]
    prior = _interval(m.get("prior_leakage")) + (f" ({m['best_prior'].removeprefix('prior:')})"
                                                   if m.get("best_prior") else "")
    return [number(m["mean"], 3), prior, _interval(m.get("leakage"))]


def grid_table(data: dict, columns: tuple[tuple[str, str, str, str], ...], utility: bool = False) -> str:
    """Settings as rows; per (victim, attack, metric) column group: the metric, leakage over the best prior
    [CI] (the prior named) and leakage over the swap control [CI]."""
    cells = {(c["victim"], c["attack"], c["setting"]): c for c in data["cells"]}
    settings = list(dict.fromkeys(c["setting"] for c in data["cells"]))
    header = ["setting"]
    for _, _, _, label in columns:
        header += [label, f"{label}: leakage vs best prior", f"{label}: vs control"]
    if utility:
        header += ["val return (defended)", "val success"]
    rows = []
    for setting in settings:
        row = [f"`{setting}`"]
        for victim, attack, metric, _ in columns:
            row += _grid_cell(cells, (victim, attack, setting), metric)
        if utility:
            task = next(c["task"] for c in data["cells"])
            u = data["utility"].get(f"{task}/{columns[0][0]}/{setting}", {})
            row += [number(u.get("val_return"), 3), number(u.get("val_success"), 2)]
        rows.append(row)
    return markdown(header, rows)


def defenses_grid_pointnav(data: dict) -> str:
    return grid_table(data, (("ppo", "closed_form", "action_accuracy", "PPO action acc."),
                             ("a2c", "closed_form", "action_accuracy", "A2C action acc.")))


def defenses_grid_ap(data: dict) -> str:
    return grid_table(data, (("dqn_compact", "closed_form", "action_accuracy", "closed_form action acc."),
                             ("dqn_compact", "qgi", "rgb_psnr", "qgi RGB PSNR"),
                             ("dqn_compact", "qgi", "depth_psnr", "qgi depth PSNR"),
                             ("dqn_compact", "qgi", "bbox_iou", "qgi box IoU")))


DEFENDED_TRAINING = "benchmarks/results/bench_defended_training.json"
_TRAINING_LABELS = {
    "sb3": "plain SB3",
    "none (mean path)": "`none` (mean path)",
    "dp_sgd norms path, train_noise=mean": "`dp_sgd(C=1, sigma=1, train_noise=mean)` (norms path)",
    "dp_sgd norms path, per-sample draws": "`dp_sgd(C=1, sigma=1)` (norms path, per-sample noise draws)",
    "dp_sgd per-sample path (old)": "`dp_sgd(C=1, sigma=1)` forced onto the per-sample path",
    "quantize 8 bit (per-sample path)": "`quantize(bits=8)` (per-sample path, `release_mean`)",
    "topk keep=0.1 (per-sample path)": "`topk(keep=0.1)` (per-sample path, `release_mean`)",
}


def defended_training_cost(data: dict) -> str:
    """Whole defended training runs against plain SB3 (wall and CPU), then one minibatch update per path."""
    rows = []
    for key, label in _TRAINING_LABELS.items():
        r = data["training"].get(key)
        if r is not None:
            rows.append([label, f"{r['wall_s']:.1f}", f"{r['wall_x_sb3']:.2f}", f"{r['cpu_s']:.1f}", f"{r['cpu_x_sb3']:.2f}"])
    update = [[f"{key}", f"{r['ms']:.1f}", f"{r['x_sb3']:.2f}"] for key, r in data["per_update"].items()]
    m = data["machine"]
    return (markdown(["path", "wall s", "x SB3", "CPU s", "x SB3"], rows) + "\n"
            + markdown(["one 64-frame minibatch update", "ms", "x SB3"], update)
            + f"\n{data['budget']} steps per training run, {m['threads']} torch thread, torch {m['torch']}, {m['cpus']} CPUs; "
              f"1-minute load average {m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after.\n")


FRONTIER = "docs/data/frontier/pointnav_ppo.json"


def frontier_pointnav(data: dict) -> str:
    """One row per setting: val return after fine-tuning (mean ± sd over seeds), its cost against the
    undefended fine-tuning paired by seed (95% t-interval over seeds; resolved when it excludes 0), and the
    leakage over the best prior of the same checkpoint's release on each axis (closed-form actions, TRACE
    actions), with whether the setting is on that axis's Pareto frontier; rows not yet run say so."""
    axes = list(data["leakage_sources"])
    names = {"closed_form": "closed-form", "trace": "TRACE"}
    header = ["setting", "seeds", "val return (mean ± sd)", "val success", "cost in return [95% CI over seeds]",
              "cost resolved?", *(f"{names.get(a, a)} action leakage over best prior [95% CI]" for a in axes),
              "on frontier"]
    rows = []
    for r in data["rows"]:
        leaks = []
        for attack in axes:
            lk = (r.get("leakage") or {}).get(attack)
            leaks.append(f"{number(lk['mean'], 3)} [{number(lk['ci_low'], 3)}, {number(lk['ci_high'], 3)}]" if lk else "--")
        if not r["n_seeds"]:
            rows.append([f"`{r['setting']}`", "0", "not run yet", "", "", "", *leaks, ""])
            continue
        c = r["cost"]
        sd = "" if r["val_return_sd"] is None else f" ± {number(r['val_return_sd'], 3)}"
        front = ", ".join(names.get(a, a) for a in axes if (r.get("on_frontier") or {}).get(a))
        rows.append([f"`{r['setting']}`", str(r["n_seeds"]), f"{number(r['val_return'], 3)}{sd}",
                     number(r["val_success"], 3),
                     f"{number(c['mean'], 3)} [{number(c['ci_low'], 3)}, {number(c['ci_high'], 3)}]",
                     "**yes**" if r["cost_resolved"] else "no", *leaks, front])
    return markdown(header, rows)


# ------------------------------------------------------------------ continuous actions (docs/continuous-actions.md)

CONTINUOUS = "benchmarks/results/continuous_pipeline.json"


def _mean_ci(metric: dict | None, digits: str) -> str:
    """``mean [low, high]`` of a summary in ``digits`` (a format spec such as ``.3g``)."""
    if not metric or not isinstance(metric.get("mean"), (int, float)):
        return "--"
    low, high = metric.get("ci_low"), metric.get("ci_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return f"{metric['mean']:{digits}} [{low:{digits}}, {high:{digits}}]"
    return f"{metric['mean']:{digits}}"


def continuous_pipeline(data: dict) -> str:
    defenses = ("none", "gaussian_noise", "topk")

    def order(unit: dict) -> tuple:
        u = unit["unit"]
        return (u["attack"] != "closed_form_gaussian", u["victim"], u["checkpoint"] != "init",
                defenses.index(u["defense"]) if u["defense"] in defenses else len(defenses), u["defense"])

    rows = []
    for unit in sorted(data["units"].values(), key=order):
        u, m = unit["unit"], unit["metrics"]
        params = ", ".join(f"{k} {v:g}" for k, v in u["defense_params"].items())
        mae, sign = m.get("action_mae", {}), m.get("action_sign_accuracy", {})
        best = (mae.get("best_prior") or "--").removeprefix("prior:")
        rows.append([f"`{u['attack']}`", f"`{u['victim']}/{u['checkpoint']}`",
                     f"`{u['defense']}`" + (f" ({params})" if params else ""), _mean_ci(mae, ".3g"),
                     f"{best} {number(mae.get('best_prior_mean'), 3)}", _mean_ci(mae.get("prior_leakage"), ".3g"),
                     _mean_ci(m.get("action_linear_ae"), ".3g"), _mean_ci(m.get("action_angular_ae"), ".3g"),
                     _mean_ci(sign, ".3f"),
                     f"{(sign.get('best_prior') or '--').removeprefix('prior:')} {number(sign.get('best_prior_mean'), 3)}",
                     _mean_ci(m.get("rgb_psnr"), ".2f"), number(unit["wall_seconds"], 0),
                     number(unit.get("fit_seconds"), 0)])
    return markdown(["attack", "victim", "defense", "action MAE [95% CI]", "best prior (MAE)",
                     "leakage vs best prior", "linear abs. err.", "angular abs. err.", "sign accuracy",
                     "sign: best prior", "RGB PSNR (dB)", "wall s", "fit s"], rows)


# ------------------------------------------------------------------ evaluate speed (docs/evaluate.md)

BENCH_EVALUATE = "benchmarks/results/bench_evaluate.json"
BENCH_IMPORTS = "benchmarks/results/bench_imports.json"
_IMPORT_LABELS = {
    "import_torch": "`import torch`",
    "import_pandas": "`import pandas`",
    "import_scipy_special": "`import scipy.special` (numpy loaded)",
    "import_wandb": "`import wandb` (pandas kept out)",
    "wandb_init_with_launch_inputs": "offline `wandb.init`, Launch inputs applied (wandb's default)",
    "wandb_init_without_launch_inputs": "offline `wandb.init`, Launch inputs skipped (the W&B process here)",
}


def import_costs(data: dict) -> str:
    rows = [[label, f"{data['probes'][name]['cpu_median_s']:.2f}", f"{data['probes'][name]['wall_median_s']:.2f}"]
            for name, label in _IMPORT_LABELS.items() if name in data["probes"]]
    return markdown(["in a fresh process", "CPU s, median", "wall s, median"], rows) + (
        f"\n{data['cpu']} ({data['cpus']} CPUs), 1 thread, median of {data['repeats']}, {data['date']}; 1-minute load "
        f"average {data['load_before']:.2f} before, {data['load_after']:.2f} after.\n")
BENCH_EVALUATE_EPYC = "benchmarks/results/bench_evaluate_epyc.json"


def _signed_ms(seconds: float) -> str:
    return f"{'+' if seconds >= 0 else '-'} {abs(1e3 * seconds):.0f} ms"


def evaluate_speed(data: dict) -> str:
    """One row per figure of a ``benchmarks/bench_evaluate.py`` results file: wall and CPU medians with every
    run and the load around them."""
    before = (data.get("before") or {}).get("commit", "before")

    def row(label: str, fig: dict | None) -> list[str] | None:
        if not fig:
            return None
        runs = ", ".join(f"{w:.2f}" for w in fig["wall_runs_s"])
        low, high = fig.get("load_range", [fig["load_before"], fig["load_after"]])
        return [label, f"**{fig['median_s']:.2f}** ({runs})", f"{fig['cpu_median_s']:.2f}", f"{low:.2f}-{high:.2f}"]

    fit, now = data.get("fit") or {}, data["commit"]
    figures = [
        (f"code of {before}, warm", data.get("before_evaluate_warm")),
        (f"**code of {now}, warm**", data.get("evaluate_warm")),
        (f"code of {now}, caches of the card and read gradients removed before each run (recomputed)",
         data.get("evaluate_warm_recomputed")),
        (f"code of {now}, warm, `--wandb disabled`", data.get("evaluate_warm_wandb_disabled")),
        (f"code of {before}, warm, `--defense clip_norm -D C=1`", data.get("before_evaluate_warm_defended")),
        (f"code of {now}, warm, `--defense clip_norm -D C=1`", data.get("evaluate_warm_defended")),
        (f"code of {before}, one busy neighbour", data.get("before_evaluate_busy_neighbour")),
        (f"**code of {now}, one busy neighbour**", data.get("evaluate_busy_neighbour")),
        (f"code of {now}, resume of a finished run (nothing to score)", data.get("evaluate_resume")),
        *[(f"code of {now}, `--episodes {n}`", data.get(f"evaluate_warm_episodes_{n}")) for n in (1, 12, 48)],
        ("`gradleak-bench --help`", data.get("import_cli")),
    ]
    rows = [r for r in (row(label, fig) for label, fig in figures) if r is not None]
    ratio = data.get("busy_neighbour_ratio") or {}
    replay = data.get("replay_ms_per_8_step_episode") or {}
    cpu = data.get("cpu", "CPU model not recorded")
    notes = [f"{data['threads']} torch thread, {cpu} ({data['cpus']} CPUs), {data['date']}; CPU = user + sys "
             f"of the whole process tree ({data['cpu_accounting']})."]
    if ratio:
        notes.append(f"One busy neighbour / alone: **{ratio['wall']:.2f}** wall, {ratio['cpu']:.2f} CPU.")
    if fit:
        notes.append(f"Least squares over `--episodes` 1, 12, 48: **{fit['fixed_s']:.2f} s {_signed_ms(fit['per_episode_s'])} "
                     f"per episode** of wall (CPU {fit['cpu_fixed_s']:.2f} s {_signed_ms(fit['cpu_per_episode_s'])}).")
    if replay:
        notes.append(f"Recomputing one 8-step episode's exact gradients in one process: **{replay['median_ms']:.1f} "
                     f"ms** wall, {replay['cpu_median_ms']:.1f} ms CPU (median of {replay['episodes']}).")
    return markdown(["`evaluate closed_form`, default split (48 episodes), W&B offline", "wall s, median (runs)",
                     "CPU s, median", "1-min load"], rows) + "\n" + " ".join(notes) + "\n"


# ------------------------------------------------------------------ public split vs fresh layouts (docs/leaderboard.md)

FRESH_GAP = "benchmarks/results/fresh_gap.json"


def fresh_gap(data: dict) -> str:
    """Per committed entry and board: public (development) score, fresh-layout score, gap, the strongest
    reference on the fresh layouts and the leakage over it, verify seconds."""
    def iv(x: dict | None, digits: int) -> str:
        if not x:
            return "--"
        return f"{number(x['mean'], digits)} [{number(x['ci_low'], digits)}, {number(x['ci_high'], digits)}]"

    rows = []
    for r in data["rows"]:
        digits = 1 if "psnr" in r["metric"] else 3
        ref = (r.get("reference") or "--").removeprefix("prior:").replace("swap_control", "swap control")
        rows.append([f"`{r['entry'].removesuffix('.json')}`", f"`{r['metric']}`", iv(r["public"], digits),
                     iv(r.get("fresh"), digits) + (f" ({r['layouts']})" if r.get("layouts") else ""),
                     f"{r['gap']:+.{digits}f}" if r.get("gap") is not None else r["status"], ref,
                     iv(r.get("leakage"), digits), number(r.get("verify_seconds"), 0)])
    return markdown(["entry", "board metric", "public split (development) [95% CI]", "fresh layouts [95% CI] (layouts)",
                     "fresh - public", "strongest reference (fresh)", "leakage over it (fresh)", "verify s"], rows) + \
        f"\n{data['protocol']}; {data['machine']['cpus']} cores; {data['conditions']}.\n"


# ------------------------------------------------------------------ registry

TABLES: dict[str, Table] = {
    "per_sample_speed": Table("docs/gradient-stream.md", (PER_SAMPLE_B8, PER_SAMPLE_B64), per_sample_speed),
    "inversion_table1": Table("docs/inversion-attacks.md", (INVERSION, PAPER), inversion_table1),
    "inversion_ablation": Table("docs/inversion-attacks.md", (INVERSION,), inversion_ablation),
    "inversion_speed": Table("docs/inversion-attacks.md", (INVERSION_SPEED,), inversion_speed),
    "budget_curves": Table("docs/inversion-attacks.md", BUDGET_CURVES, budget_curves),
    "budget_costs": Table("docs/inversion-attacks.md", BUDGET_CURVES, budget_costs),
    "budget_frames": Table("docs/inversion-attacks.md", BUDGET_FRAMES, budget_frames),
    "ig_reference": Table("docs/inversion-attacks.md", (IG_REFERENCE,), ig_reference),
    "ig_reference_loss": Table("docs/inversion-attacks.md", (IG_REFERENCE,), ig_reference_loss),
    "tsp_results": Table("docs/tsp.md", (TSP,), tsp_results),
    "trace_speed": Table("docs/trace.md", (TRACE_SPEED,), trace_speed),
    "trace_per_timestep": Table("docs/trace.md", (TRACE_STEPS,), trace_per_timestep),
    "trace_adaptive": Table("docs/trace.md", (TRACE_ADAPTIVE,), trace_adaptive),
    "trace_adaptive_quick": Table("docs/trace.md", (TRACE_ADAPTIVE_QUICK,), trace_adaptive),
    "closed_form_margin": Table("docs/closed-form.md", (MARGIN,), closed_form_margin),
    "defenses_closed_form": Table("docs/defenses.md", (DEFENSES_CLOSED_FORM,), defenses_closed_form),
    "priors_scores": Table("docs/priors.md", (PRIORS_PPO_INIT,), priors_scores),
    "priors_scores_trained": Table("docs/priors.md", (PRIORS_PPO_TRAINED,), priors_scores_images),
    "priors_scores_a2c_trained": Table("docs/priors.md", (PRIORS_A2C_TRAINED,), priors_scores_images),
    "priors_cost": Table("docs/priors.md", (PRIORS_PPO_INIT,), priors_cost),
    "calibrated_runs": Table("docs/priors.md", CALIBRATED_RUNS, calibrated_runs),
    "calibrated_qgi": Table("docs/priors.md", CALIBRATED_QGI, calibrated_runs),
    "split_identity_margins": Table("docs/tasks.md", (SPLIT_MARGINS,), split_identity_margins),
    "split_identity_margins_84": Table("docs/tasks.md", (SPLIT_MARGINS_84,), split_identity_margins),
    "victim_behaviour": Table("docs/tasks.md", (VICTIM_BEHAVIOUR,), victim_behaviour),
    "victim_validation": Table("docs/tasks.md", VICTIM_VALIDATION, victim_validation),
    "headline_closed_form": Table("docs/closed-form.md", CLOSED_FORM_RUNS, headline_closed_form),
    "headline_tsp": Table("docs/tsp.md", TSP_RUNS, headline_tsp),
    "defenses_grid_ap": Table("docs/defenses.md", (GRID_AP,), defenses_grid_ap),
    "headline_inversion": Table("docs/inversion-attacks.md", INVERSION_RUNS, headline_inversion),
    "headline_trace": Table("docs/trace.md", TRACE_RUNS, headline_trace),
    "headline_summary": Table("docs/priors.md", ALL_RUNS, headline_summary),
    "headline_conditions": Table("docs/priors.md", ALL_RUNS, headline_conditions),
    "defenses_grid_pointnav": Table("docs/defenses.md", (GRID_POINTNAV,), defenses_grid_pointnav),
    "frontier_pointnav": Table("docs/defenses.md", (FRONTIER,), frontier_pointnav),
    "defended_training_cost": Table("docs/defenses.md", (DEFENDED_TRAINING,), defended_training_cost),
    "resolution_closed_form": Table("docs/trace.md", RESOLUTION_CLOSED_FORM_RUNS, resolution_table),
    "resolution_trace": Table("docs/trace.md", RESOLUTION_TRACE_RUNS, resolution_trace),
    "trace_attacker_seeds": Table("docs/trace.md", TRACE_SEED_RUNS, trace_attacker_seeds),
    "trace_attacker_seeds_84": Table("docs/trace.md", TRACE_SEED_RUNS_84, trace_attacker_seeds),
    "trace_paper_curve": Table("docs/trace.md", (TRACE_PAPER_CURVE,), trace_paper_curve),
    "trace_vs_paper": Table("docs/trace.md", (TRACE_PAPER, TRACE_SPEED, TRACE_ADAPTIVE_QUICK,
                                              *TRACE_ANALYTIC_RUNS, *TRACE_84_RUNS), trace_vs_paper),
    "resolution_inversion": Table("docs/inversion-attacks.md", RESOLUTION_IG_RUNS, resolution_inversion),
    "continuous_pipeline": Table("docs/continuous-actions.md", (CONTINUOUS,), continuous_pipeline),
    "evaluate_speed_epyc": Table("docs/evaluate.md", (BENCH_EVALUATE_EPYC,), evaluate_speed),
    "evaluate_speed_fast": Table("docs/evaluate.md", (BENCH_EVALUATE,), evaluate_speed),
    "import_costs": Table("docs/evaluate.md", (BENCH_IMPORTS,), import_costs),
    "fresh_gap": Table("docs/leaderboard.md", (FRESH_GAP,), fresh_gap),
}


def render(name: str) -> str:
    table = TABLES[name]
    return table.render(*(load(path) for path in table.sources))


def rewrite(text: str, doc: str) -> tuple[str, list[str]]:
    """``text`` with every marked table re-rendered, and the problems found (unknown or misplaced names)."""
    problems: list[str] = []

    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            problems.append(f"{doc}: unknown table {name!r} (known: {', '.join(TABLES)})")
            return match[0]
        if TABLES[name].doc != doc:
            problems.append(f"{doc}: table {name!r} belongs in {TABLES[name].doc}")
            return match[0]
        return f"<!-- table: {name} -->\n{render(name)}<!-- /table -->"

    return MARKER.sub(replace, text), problems


def check() -> list[str]:
    """Every problem: a registered table missing from its doc, an unknown marker, a table differing from its
    source."""
    problems = []
    docs = {t.doc for t in TABLES.values()} | {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    for doc in sorted(docs):
        text = (ROOT / doc).read_text()
        found = [m["name"] for m in MARKER.finditer(text)]
        for name, table in TABLES.items():
            if table.doc == doc and found.count(name) != 1:
                problems.append(f"{doc}: table {name!r} appears {found.count(name)} times, expected once")
        new, issues = rewrite(text, doc)
        problems += issues
        for match_old, match_new in zip(MARKER.finditer(text), MARKER.finditer(new)):
            if match_old[0] != match_new[0]:
                sources = ", ".join(TABLES[match_old["name"]].sources)
                problems.append(f"{doc}: table {match_old['name']!r} differs from its source ({sources}); "
                                "run python tools/make_docs_tables.py")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if any table differs")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        print("\n".join(problems) or "every docs table matches its source")
        return 1 if problems else 0
    for doc in sorted({t.doc for t in TABLES.values()}):
        path = ROOT / doc
        new, problems = rewrite(path.read_text(), doc)
        for problem in problems:
            print(problem, file=sys.stderr)
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
