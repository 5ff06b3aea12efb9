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


# ------------------------------------------------------------------ split identity (docs/tasks.md)

SPLIT_MARGINS = "benchmarks/results/split_identity_margins.json"


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


# ------------------------------------------------------------------ registry

TABLES: dict[str, Table] = {
    "inversion_table1": Table("docs/inversion-attacks.md", (INVERSION, PAPER), inversion_table1),
    "inversion_ablation": Table("docs/inversion-attacks.md", (INVERSION,), inversion_ablation),
    "inversion_speed": Table("docs/inversion-attacks.md", (INVERSION_SPEED,), inversion_speed),
    "tsp_results": Table("docs/tsp.md", (TSP,), tsp_results),
    "trace_speed": Table("docs/trace.md", (TRACE_SPEED,), trace_speed),
    "trace_per_timestep": Table("docs/trace.md", (TRACE_STEPS,), trace_per_timestep),
    "closed_form_margin": Table("docs/closed-form.md", (MARGIN,), closed_form_margin),
    "defenses_closed_form": Table("docs/defenses.md", (DEFENSES_CLOSED_FORM,), defenses_closed_form),
    "priors_scores": Table("docs/priors.md", (PRIORS_PPO_INIT,), priors_scores),
    "priors_scores_trained": Table("docs/priors.md", (PRIORS_PPO_TRAINED,), priors_scores_images),
    "priors_scores_a2c_trained": Table("docs/priors.md", (PRIORS_A2C_TRAINED,), priors_scores_images),
    "priors_cost": Table("docs/priors.md", (PRIORS_PPO_INIT,), priors_cost),
    "calibrated_runs": Table("docs/priors.md", CALIBRATED_RUNS, calibrated_runs),
    "calibrated_qgi": Table("docs/priors.md", CALIBRATED_QGI, calibrated_runs),
    "split_identity_margins": Table("docs/tasks.md", (SPLIT_MARGINS,), split_identity_margins),
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
