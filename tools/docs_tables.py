"""The docs tables as data: one spec per marked table, rendered by ``tools/make_docs_tables.py``.

A :class:`Table` names its doc, its source files (each bound to a name; a tuple of files binds the list of
them), its rows and its columns. Nothing here is code that runs per table: every string is read by the one
renderer.

**Expressions** choose: a loop's ``over``, a ``where`` or ``When`` test, a ``let`` value, an ``order`` key.
An expression is a path into the bound data, ``run.metrics[metric].mean`` (``[name]`` reads the key held by
``name``; ``x.a?`` is None where ``a`` is absent or ``x`` is None; ``runs.*.n_frames`` reads it from every
element), then filters, ``m|interval('.2f')``, whose arguments are expressions or literals (``'text'``,
numbers, ``true``, ``false``, ``none``); ``|.key`` reads on from a filter's result. The filters are the
renderer's ``FILTERS``, shared by every table.

**Texts** show: a header, a cell, a note. A text is a template, ``"{m.mean:.3f} ({n} episodes)"``, where each
``{expression:spec}`` is filled in with the format spec (``--`` for a missing number); or a :class:`When`
(one text or another), a :class:`Join` (a text per item), or a tuple of texts, one after the other.

A ``let`` or ``over`` that is a tuple is literal data, not an expression; ``{label|fill}`` reads such a
literal string as a template where it is used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class When:
    """``then`` where the expression ``test`` is truthy, else ``otherwise``."""
    test: str
    then: Text
    otherwise: Text = "--"


@dataclass(frozen=True)
class Join:
    """``text`` once per item of ``over`` (bound to ``names``, as a :class:`Loop` binds), joined by ``sep``;
    ``empty`` when no item passes ``where``."""
    names: str
    over: str | tuple
    text: Text
    sep: str = ", "
    where: str | tuple = ()
    empty: str = ""


Text = Union[str, When, Join, tuple]


@dataclass(frozen=True)
class Col:
    """A column: its header (filled from the table's names) and each row's cell. An ``optional`` column is
    left out when every cell is empty; otherwise its empty cells read ``--``."""
    header: Text
    cell: Text
    optional: bool = False


@dataclass(frozen=True)
class Each:
    """Its ``columns`` repeated per item of ``over`` (bound to ``names``); ``let`` is evaluated per cell."""
    names: str
    over: str | tuple
    columns: tuple
    let: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One row of literal cells (texts, or :class:`Each` groups of texts), where ``when`` holds."""
    cells: tuple
    when: str | None = None


@dataclass(frozen=True)
class Loop:
    """A row per item of ``over``: one name binds a list's element or a dict's value, several unpack an item
    or take a dict's (key, value). ``order``: sort keys; ``index``: a name for the item's position; ``let``:
    names evaluated per item, before the ``where`` tests. ``then``: a nested loop makes the rows instead;
    ``after``: a row after each item's rows; ``cells``: this loop's own cells instead of the columns'."""
    names: str
    over: str | tuple
    where: str | tuple = ()
    let: dict = field(default_factory=dict)
    order: tuple = ()
    index: str | None = None
    then: Loop | None = None
    after: Row | None = None
    cells: tuple | None = None


@dataclass(frozen=True)
class Grid:
    """A further table under the first (same sources and names)."""
    rows: Loop | Row | tuple
    columns: tuple


@dataclass(frozen=True)
class Table:
    """``sources``: name -> a file, or a tuple of files (the list of them); ``skip_missing``: a tuple takes only
    the files present (results written one at a time). ``rows``: loops and rows, in order; ``columns``:
    :class:`Col` and :class:`Each` (a plain text is a header alone, where every row brings its own cells).
    ``let``: names for the whole table. ``more``: further tables; ``note``: a paragraph after them (a tuple of
    texts: the non-empty ones joined by a space)."""
    doc: str
    sources: dict
    rows: Loop | Row | tuple
    columns: tuple
    let: dict = field(default_factory=dict)
    more: tuple = ()
    note: Text = ""
    skip_missing: bool = False


# ------------------------------------------------------------------ shared pieces

RUN = "{run|run_label}"
WHO = "{run|who}"
BEST = When("m.best_prior?", "{m.best_prior|prior} {m.best_prior_score.mean:.3g}")
PRIOR_LEAKAGE = When("m.best_prior?", "{m.prior_leakage?|interval}")
# a committed rerun (benchmarks/headline_leakage.py), one row per metric in ``only``
# the leakage is over the strongest reference only: the stronger of the best prior and the swap control
STRONGEST = When("m|strongest", "{m|strongest|.name}")
STRONGEST_LEAKAGE = When("m|strongest", "{m|strongest|.reference_leakage|interval}")
HEADLINE = (Col("metric", "`{metric}`"), Col("attack [95% CI]", "{m|interval}"), Col("best prior", BEST),
            Col("swap control", "{m.control?|interval}"), Col("strongest reference", STRONGEST),
            Col("leakage vs strongest reference [95% CI]", STRONGEST_LEAKAGE),
            Col("beyond it?", "{m|verdict(n)}"), Col("episodes", "{n}"))
RUN_METRICS = Loop("run", "runs", then=Loop("metric, m", "run.metrics", where="metric|among(only)",
                                            let={"n": "run|scored(metric)"}))
# an evaluation's metric: the best prior (its score read from the references), the swap control
REFERENCE_BEST = When("m.best_prior?", "{m.best_prior|prior} {m.references[m.best_prior].mean:.3g}")


def headline(*names: str) -> tuple[str, ...]:
    return tuple(f"docs/data/headline/{name}.json" for name in names)


# ------------------------------------------------------------------ inversion attacks (docs/inversion-attacks.md)

INVERSION = "benchmarks/results/inversion_reproduction.json"
PAPER = "docs/data/qgi_rgi_paper.json"
# (QGI or RGI, our run with Adam in stage 1, with the closed form in stage 1)
TABLE1_ATTACKS = (("QGI", "qgi12", "qgi12_cf"), ("RGI", "rgi12", "rgi12_cf"))
TABLE1 = Table(
    "docs/inversion-attacks.md", {"repro": INVERSION, "paper": PAPER},
    rows=(Loop("metric, label, spec", (
        ("rgb_psnr_y", "RGB PSNR, Y (dB)", ".1f"), ("rgb_ssim_y", "RGB SSIM, Y", ".2f"),
        ("depth_psnr", "depth PSNR (dB, range 10 m)", ".1f"), ("depth_ssim", "depth SSIM", ".2f"),
        ("bbox_iou", "target box IoU", ".2f"), ("action_accuracy", "action accuracy", ".0%"),
        ("q_value_rel_error", "predicted Q error (%)", "sig"), ("q_target_rel_error", "target Q error (%)", "sig"),
        ("return_abs_error", "return abs. error", "sig"))),
          Row(("frames / failed", Each("attack, adam, cf", TABLE1_ATTACKS, (
              "{paper[attack].n_frames?}", "{repro.runs[adam].n_frames} / {repro.runs[adam].n_failed}",
              "{repro.runs[cf].n_frames} / {repro.runs[cf].n_failed}")))),
          Row(("attack ms per frame (1 thread)", Each("attack, adam, cf", TABLE1_ATTACKS, (
              "--", "{repro.runs[adam].ms_per_frame?:.0f}", "{repro.runs[cf].ms_per_frame?:.0f}"))))),
    columns=(Col("metric (paper protocol)", "{label}"), Each("attack, adam, cf", TABLE1_ATTACKS, (
        Col("paper {attack} (S1)", "{paper[attack][metric]?}"),
        Col("ours {attack}, Adam stage 1", "{repro.runs[adam].metrics[metric]?|attack_cell(spec)}"),
        Col("ours {attack}, closed-form stage 1", "{repro.runs[cf].metrics[metric]?|attack_cell(spec)}")))))

ABLATION = Table(
    "docs/inversion-attacks.md", {"repro": INVERSION},
    rows=Loop("key, label, flags", (
        ("qgi", "QGI (surrogate, two-stage, Adam)", "--"),
        ("qgi_cf", "QGI, closed-form stage 1", "`-A linear_solver=closed_form`"),
        ("qgi_original", "original objective (rule action, TD target optimised jointly, cosine) = paper's "
                         "\"based on inverting\"", "`-A objective=original`"),
        ("qgi_joint", "joint optimisation of box, depth, RGB", "`-A stages=joint`"),
        ("ig_dqn", "`inverting_gradients` (quick)", "--"), ("idlg_dqn", "`idlg` (quick)", "--"),
        ("dlg_dqn", "`dlg` (quick)", "--"))),
    columns=(Col("variant", "{label}"), Col("command flags", "{flags}"), Each("metric, spec, label", (
        ("rgb_psnr_y", ".1f", "RGB Y PSNR"), ("depth_psnr", ".1f", "depth PSNR"), ("bbox_iou", ".2f", "box IoU"),
        ("action_accuracy", ".0%", "action accuracy"), ("q_value_rel_error", "sig", "predicted Q error %"),
        ("q_target_rel_error", "sig", "target Q error %")), (
        Col("{label}", "{repro.runs[key].metrics[metric]?|attack_cell(spec, false)}"),))))

INVERSION_SPEED = Table(
    "docs/inversion-attacks.md", {"data": "benchmarks/results/inversion.json"},
    rows=Loop("name, a", "data.attacks"),
    columns=(Col("attack", "`{name}`"), Col("victim", "`{a.victim}`"),
             Col("iterations / s (8 frames)", When("a.iterations_per_s?|given", "{a.iterations_per_s:.3g}",
                                                   "{a.stage1_iterations_per_s:.3g} (stage 1) / "
                                                   "{a.stage2_iterations_per_s:.3g} (stage 2)")),
             Col("s / frame, quick", "{a.s_per_frame.quick:.2f}"),
             Col("s / frame, paper (extrapolated)", "{a.s_per_frame.paper:.1f}"),
             Col("batching speed-up (8 frames, 25 iterations)", When(
                 "a.batching?", "{a.batching.speedup:.2f}x ({a.batching.looped_s:.2f} s looped vs "
                                "{a.batching.batched_s:.2f} s batched)"))))

# budget curves (benchmarks/budget_curves.py): one run per frame at the source budget, checkpoints along it;
# the files are written one attack at a time
BUDGET_CURVES = tuple(f"docs/data/budget_curves/{name}.json"
                      for name in ("inverting_gradients", "dlg", "idlg", "qgi", "rgi"))
BUDGET_FRAMES = tuple(f"docs/data/budget_curves/{name}.json" for name in ("qgi", "rgi"))
FIRST_ROW_OF_RUN = "i|eq(0)"

BUDGET_CURVES_TABLE = Table(
    "docs/inversion-attacks.md", {"runs": BUDGET_CURVES}, skip_missing=True,
    rows=Loop("run", "runs", let={"cfg": "run.config"},
              then=Loop("point", "run.summary.rgb_psnr.curve", index="i")),
    columns=(Col("attack", When(FIRST_ROW_OF_RUN, "`{cfg.attack}`", "")),
             Col("frames", When(FIRST_ROW_OF_RUN, "{run.frames|len}", "")),
             Col("iterations", When(
                 "point.iterations|given",
                 When("cfg.snapshot_offset",
                      "{cfg.snapshot_offset:,} + {point.iterations|minus(cfg.snapshot_offset):,}",
                      "{point.iterations:,}"),
                 When("cfg.quick_checkpoint", "quick preset (= {cfg.quick_checkpoint})", "quick preset (own run)"))),
             Each("metric, spec, signed", (("rgb_psnr", ".1f", "+.1f"), ("rgb_ssim", ".2f", "+.2f"),
                                           ("depth_psnr", ".1f", "+.1f")), (
                 Col("{metric}", When("p|given", "{p|interval(spec)}")),
                 Col("{metric} - best prior", When("p.leakage?", "{p.leakage|interval(signed)}"))),
                 let={"p": "run.summary[metric]?.curve?[i]?"})))

BUDGET_COSTS = Table(
    "docs/inversion-attacks.md", {"runs": BUDGET_CURVES}, skip_missing=True,
    rows=Loop("run", "runs", let={
        "paper": "run.settings.paper",
        "loads": "run.units.*.machine_before.load_average.0|concat(run.units.*.machine_after.load_average.0)"}),
    columns=(Col("attack", "`{run.config.attack}`"), Col("victim", "`{run.config.victim}`"),
             Col("paper budget", When("paper.stage1?|given", "{paper.stage1:,} + {paper.stage2:,}",
                                      "{paper.iterations:,}")),
             Col("frames", "{run.frames|len}"), Col("wall s / frame", "{run.paper_wall_s_per_frame:.1f}"),
             Col("CPU s / frame", "{run.paper_cpu_s_per_frame:.1f}"),
             Col("wall min, all (paper + quick)", "{run.wall_s_total|per(60):.1f}"),
             Col("CPU min, all", "{run.cpu_s_total|per(60):.1f}"),
             Col("load average (1 min)", "{loads|min:.1f}-{loads|max:.1f}"), Col("threads", "{run.threads}")))

# per frame at the paper budget: RGB and depth at the end of the run, beside the `quick` run on the same frame
# and the best prior (the run's at the paper budget, per frame); whether stage 1 solved the first layer
BUDGET_FRAMES_TABLE = Table(
    "docs/inversion-attacks.md", {"runs": BUDGET_FRAMES}, skip_missing=True,
    # a depth PSNR this high means stage 1 recovered the linear part (depth enters it verbatim)
    let={"solved_db": "60.0"},
    rows=Loop("run", "runs", let={
        # each metric's best prior at the paper budget (the last checkpoint with an iteration count)
        "best_rgb": "run.summary.rgb_psnr.curve|has('iterations')|last|.best_prior",
        "best_depth": "run.summary.depth_psnr.curve|has('iterations')|last|.best_prior"},
        then=Loop("f", "run.frames"),
        after=Row(("`{run.config.attack}`",
                   "**{run.frames.*.final.depth_psnr|count_ge(solved_db)} of {run.frames|len} solved**",
                   "best prior: {best_rgb|prior}", "", "", "", "best prior: {best_depth|prior}", ""))),
    columns=(Col("attack", "`{run.config.attack}`"), Col("frame (episode@step)", "{f.frame}"),
             Col("RGB PSNR, paper budget", "{f.final.rgb_psnr:.1f}"),
             Col("- best prior (same frame)", "{f.final.rgb_psnr|minus(f.priors[best_rgb].rgb_psnr):+.1f}"),
             Col("RGB PSNR, quick run", "{f.quick.rgb_psnr:.1f}"),
             Col("depth PSNR, paper budget", "{f.final.depth_psnr:.1f}"),
             Col("depth PSNR, best prior", "{f.priors[best_depth].depth_psnr:.1f}"),
             Col("stage 1 solved (depth >= {solved_db:.0f} dB)", "{f.final.depth_psnr|ge(solved_db)|yesno}")))

# the paper gap at 150x150 by cause (benchmarks/qgi_paper_gap.py): one file per arm, written as it runs
def _gap_arm_names(attack: str) -> tuple[str, ...]:
    """An attack's arms at init, then its arms on trained victims (issue 40): QGI's closed-form arms on the
    trained ``dqn_150``; RGI's on the paper's own network, ``reinforce_convdepth_150`` and (the one REINFORCE
    that learned) ``reinforce_convdepth`` at 64x64, at init and trained (``reinforce_150``, SB3's network,
    never learned)."""
    settings = (("paper", 150), ("quick", 150), ("quick", 64))
    at_init = tuple(f"{attack}_{preset}_{solver}_{size}" for preset, size in settings for solver in ("adam", "cf"))
    if attack == "qgi":
        return at_init + tuple(f"qgi_{preset}_cf_150_trained" for preset in ("paper", "quick"))
    return at_init + tuple(f"rgi_{preset}_{solver}_{size}_convdepth{suffix}" for size in (150, 64)
                           for suffix in ("", "_trained")
                           for preset in ("paper", "quick") for solver in ("adam", "cf"))


GAP_ARMS = tuple(f"docs/data/qgi150/{name}.json" for attack in ("qgi", "rgi") for name in _gap_arm_names(attack))
GAP_ORDER = tuple(path.rsplit("/", 1)[1].removesuffix(".json") for path in GAP_ARMS)
GAP_HEADS = {"h_qgi_adam": "qgi_adam_ActivePerception_dqn_init", "h_qgi_cf": "qgi_cf_ActivePerception_dqn_init",
             "h_rgi_adam": "rgi_adam_ActivePerception_reinforce_init",
             "h_rgi_cf": "rgi_cf_ActivePerception_reinforce_init"}


def _over_frames(name: str) -> When:
    """An arm's metric as mean (range over its frames): a handful of frames at the paper budget, no CI worth
    printing."""
    mean = f"{{{name}.mean|fmt(spec)}}"
    spread = f"{mean} ({{{name}.min|fmt(spec)}} to {{{name}.max|fmt(spec)}})"
    return When(f"{name}|given", When(f"{name}.min|eq({name}.max)", mean, spread))


def _arm(attack: str, name: str) -> str:
    return f"arms|find('arm', '{attack}_{name}')"


def _gap_rows(attack: str, rows: tuple) -> Loop:
    """One row per (metric, label, format, what explains the gap) of ``attack`` (qgi or rgi)."""
    return Loop("metric, label, spec, why", rows, index="i", let={
        "attack": f"'{attack.upper()}'", "adam": _arm(attack, "paper_adam_150"), "cf": _arm(attack, "paper_cf_150"),
        "tr": _arm(attack, GAP_TRAINED[attack]),
        "a": "adam.metrics?[metric]?", "c": "cf.metrics?[metric]?", "t": "tr.metrics?[metric]?",
        "ha": f"h_{attack}_adam.metrics[metric]?", "hc": f"h_{attack}_cf.metrics[metric]?"})


# what each row's gap is attributed to, as far as the arms separate the causes (docs/inversion-attacks.md)
GAP_WHY = {
    "qgi_rgb": "**stage 1**: solved (closed form), the paper's setting gives 37.8 dB (median 29.0; 23.7-32.1 on six "
               "frames, 48 and 93 on two), above the paper's 21.0 and +21.3 [+11.7, +46.0] over the prior; the "
               "paper's Adam stage 1 fails on all 4 frames and stage 2 then ends under the prior, falling with "
               "iterations. **budget**: +3 to +75 dB over quick (median +10) once stage 1 is solved. "
               "**resolution**: none at quick (12 frames). **scene**: not separated",
    "ssim": "**resolution** raises SSIM-Y of every image, priors included (a flat mean-colour frame: 0.61-0.64 at "
            "64x64, 0.76 at 150x150, 12 frames), so part of the paper's SSIM is the metric at 150x150; the rest "
            "follows stage 1 as RGB does",
    "depth": "**stage 1** alone (depth is a stage-1 variable): exact when solved, at the prior when Adam fails. "
             "**architecture**: in the paper depth passes convolutions, in SB3's MultiInputPolicy it enters the "
             "first linear layer verbatim; on the paper's network (`reinforce_convdepth_150`, 12 frames, quick) "
             "RGI's depth at init is 4.8 dB below the mean frame, not exact. **training**: on that network at "
             "150x150 and the paper budget (closed form + 10^4, 8 frames each) depth is 14.0 dB at init (+1.2 "
             "[-0.9, +2.0] over the strongest reference: no leak shown) and 25.9 dB trained (+12.8 [+10.3, "
             "+16.9]), above the paper's 18.6; at 64x64 the same, 14.6 (+1.5 [-1.1, +3.9]) and 24.7 (+11.4 "
             "[+7.1, +16.9])",
    "box": "barely measured: the target is in view in 1 of the 24 paper-budget frames (QGI, closed form: IoU 1.0, "
           "every prior 0); elsewhere every empty box scores 1 and a spurious one 0",
    "qgi_q": "**stage 1** alone: the rule's Q and TD target are exact from an exact stage 1 (the paper's ~1%) and "
             "as wrong as its features otherwise, worse than the median train value",
    "rgi_rgb": "**stage 1, then the scene**: solved at the paper's resolution and budget RGI gives 18.6 dB (13.3-24.3, "
               "8 frames), the paper's 17.1, yet only +1.9 [-0.2, +5.1] over our rooms' mean train frame (CI "
               "spans 0); Adam's stage 1 fails as QGI's. **budget**: +1.1 to +10.5 dB (median +1.7) once solved. "
               "**resolution**: none at quick. **training**: on the paper's network at 150x150 and the paper "
               "budget, RGB stays at the prior at init (+0.0 [-1.5, +2.7]) and trained (-0.7 [-2.0, +0.4]), as "
               "at 64x64 (+1.1 [-0.2, +4.1], +0.2 [-1.4, +2.8])",
    "rgi_return": "no gap: read by the rule (eq. 7) in every arm; at init the policy's probabilities hardly depend "
                  "on the state",
}
# the trained-victim column's arm: the closed form at the paper budget. RGI's is on the paper's network
# (reinforce_150, SB3's network, was never trained: docs/tasks.md)
GAP_TRAINED = {"qgi": "paper_cf_150_trained", "rgi": "paper_cf_150_convdepth_trained"}
GAP_TABLE = Table(
    "docs/inversion-attacks.md",
    {"paper": PAPER, "arms": GAP_ARMS, **{k: f"docs/data/headline/{v}.json" for k, v in GAP_HEADS.items()}},
    skip_missing=True,
    rows=(_gap_rows("qgi", (
        ("rgb_psnr_y", "RGB PSNR, Y (dB)", ".1f", "qgi_rgb"), ("rgb_ssim_y", "RGB SSIM, Y", ".2f", "ssim"),
        ("depth_psnr", "depth PSNR (dB)", ".1f", "depth"), ("bbox_iou", "target box IoU", ".2f", "box"),
        ("q_value_rel_error", "predicted Q error (%)", "sig", "qgi_q"),
        ("q_target_rel_error", "target Q error (%)", "sig", "qgi_q"))),
          Row(("", "frames", "{paper.QGI.n_frames}", "{qgi_adam.frames?|len}", "{qgi_cf.frames?|len}",
               When("qgi_trained|given", "{qgi_trained.frames|len}"), "{h_qgi_adam.n_frames} / {h_qgi_cf.n_frames}", "", "", "")),
          _gap_rows("rgi", (
        ("rgb_psnr_y", "RGB PSNR, Y (dB)", ".1f", "rgi_rgb"), ("rgb_ssim_y", "RGB SSIM, Y", ".2f", "ssim"),
        ("depth_psnr", "depth PSNR (dB)", ".1f", "depth"), ("bbox_iou", "target box IoU", ".2f", "box"),
        ("return_abs_error", "return abs. error", "sig", "rgi_return"))),
          Row(("", "frames", "{paper.RGI.n_frames}", "{rgi_adam.frames?|len}", "{rgi_cf.frames?|len}",
               When("rgi_trained|given", "{rgi_trained.frames|len}", "--"),
               "{h_rgi_adam.n_frames} / {h_rgi_cf.n_frames}", "", "", ""))),
    let={"whys": GAP_WHY, **{f"{a}_{k}": _arm(a, f"paper_{k}_150") for a in ("qgi", "rgi") for k in ("adam", "cf")},
         **{f"{a}_trained": _arm(a, arm) for a, arm in GAP_TRAINED.items()}},
    columns=(Col("attack", When("i|eq(0)", "{attack}", "")), Col("metric (paper protocol)", "{label}"),
             Col("paper (150x150, 2x10^4 iterations, AI2-THOR)", "{paper[attack][metric]?}"),
             Col("ours, matched: 150x150, 10^4 + 10^4, Adam stage 1", _over_frames("a")),
             Col("ours: 150x150, 10^4 + 10^4, closed-form stage 1", _over_frames("c")),
             Col("the same on the trained victim (QGI: `dqn_150` @ trained; RGI: the paper's network, "
                 "`reinforce_convdepth_150` @ trained)",
                 When("tr|given", _over_frames("t"), "not run")),
             Col("ours: 64x64, quick (300 + 200), Adam / closed form [95% CI]",
                 When("ha|given", "{ha|interval(spec)} / {hc|interval(spec)}")),
             Col("strongest reference (matched setting)", When("a|given", When(
                 "a|strongest", "{a|strongest|.name} {a|strongest|.mean|fmt(spec)}"))),
             Col("matched: leakage over it (positive = leaks)", When("a|given", When(
                 "a|strongest", "{a|strongest|oriented('reference_leakage')|interval('+.3g')}"))),
             Col("what explains the gap", "{whys[why]?}")))


# per arm: the stage-1 split (solved = depth PSNR >= the file's threshold), RGB on each side, cost
def _split(metric: str, spec: str) -> str:
    return f"{{s.solved.{metric}?.mean?:{spec}}} / {{s.unsolved.{metric}?.mean?:{spec}}}"


GAP_ARMS_TABLE = Table(
    "docs/inversion-attacks.md", {"arms": GAP_ARMS}, skip_missing=True,
    let={"order": GAP_ORDER, "solved_db": "arms.0.config.solved_depth_psnr_db"},
    rows=Loop("run", "arms", order=("run.arm?|rank(order)",), let={
        "s": "run.by_stage1", "set": "run.settings", "m": "run.metrics.rgb_psnr_y", "ms": "run.metrics.rgb_ssim_y",
        "loads": "run.units.*.machine_before.load_average.0|concat(run.units.*.machine_after.load_average.0)"}),
    columns=(Col("attack", "`{run.config.attack}`"),
             Col("victim", "`{run.config.victim}` @ {run.config.checkpoint} "
                           "({run.config.image_size}x{run.config.image_size})"),
             Col("iterations", When("set.linear_solver|eq('closed_form')", "closed form + {set.stage2:,}",
                                    "{set.stage1:,} + {set.stage2:,}")),
             Col("frames", "{run.frames|len}"),
             Col("stage 1 solved (depth >= {solved_db:.0f} dB)",
                 When("run.config.stage1_reads_depth?|given", "not read: depth passes a CNN",
                      "{s.solved.n} of {run.frames|len}")),
             Col("RGB PSNR-Y, all frames", "{m.mean:.1f}"),
             Col("RGB PSNR-Y: solved / unsolved", _split("rgb_psnr_y", ".1f")),
             Col("RGB SSIM-Y: solved / unsolved", _split("rgb_ssim_y", ".2f")),
             Col("RGB PSNR-Y - strongest reference [95% CI]",
                 When("m|strongest", "{m|strongest|.reference_leakage|interval('+.1f')} ({m|strongest|.name})")),
             Col("RGB SSIM-Y - strongest reference [95% CI]", When(
                 "ms|strongest", "{ms|strongest|.reference_leakage|interval('+.2f')} ({ms|strongest|.name} "
                                 "{ms|strongest|.mean:.2f})")),
             Col("CPU s / frame", "{run.cpu_s_per_frame:.1f}"), Col("wall s / frame", "{run.wall_s_per_frame:.1f}"),
             Col("load average (1 min)", "{loads|min:.1f}-{loads|max:.1f}")))


# the paper-budget frames, each beside the cheaper arms on the same frame (resolution and budget one at a time),
# one row per stage-1 solver
def _on_frame(arm: str, path: str) -> str:
    return f"{{{arm}|find('frame', f.frame)|.{path}?:.1f}}"


def _solvers(attack: str) -> tuple:
    return tuple((label, *(f"{attack}_{preset}_{solver}_{size}" for preset, size in (
        ("paper", 150), ("quick", 150), ("quick", 64)))) for label, solver in (("Adam", "adam"), ("closed form", "cf")))


GAP_FRAMES_TABLE = Table(
    "docs/inversion-attacks.md", {"arms": GAP_ARMS}, skip_missing=True,
    rows=tuple(Loop("f", _arm(attack, "paper_adam_150") + "|.frames?", index="i", let={"attack": f"'{attack}'"},
                    then=Loop("stage1, paper, quick150, quick64", _solvers(attack), index="j", let={
                        "pf": "arms|find('arm', paper)|.frames?|find('frame', f.frame)",
                        "q150": "arms|find('arm', quick150)|.frames?", "q64": "arms|find('arm', quick64)|.frames?",
                        "best": "arms|find('arm', paper)|.metrics.rgb_psnr_y.best_prior"}))
               for attack in ("qgi", "rgi")),
    columns=(Col("attack", When("i|eq(0)", When("j|eq(0)", "`{attack}`", ""), "")),
             Col("frame (episode@step)", When("j|eq(0)", "{f.frame}", "")),
             Col("same view at 64x64", When("j|eq(0)", "{q64|find('frame', f.frame)|.pose|eq(f.pose)|yesno}", "")),
             Col("stage 1", "{stage1}"),
             Col("depth PSNR (stage 1, paper budget)", "{pf.values.depth_psnr?:.1f}"),
             Col("RGB PSNR-Y: 64x64 quick", _on_frame("q64", "values.rgb_psnr_y")),
             Col("150x150 quick", _on_frame("q150", "values.rgb_psnr_y")),
             Each("n, label", (("200", "200"), ("1000", "1,000"), ("3000", "3,000")), (
                 Col("150x150, 10^4 + {label} (same run)", "{pf.snapshots?[n]?.rgb_psnr_y?:.1f}"),)),
             Col("150x150, 10^4 + 10^4", "{pf.values.rgb_psnr_y?:.1f}"),
             Col("best prior (same frame)", When("j|eq(0)", "{pf.priors[best].rgb_psnr_y:.1f} ({best|prior})", ""))))


IG_REFERENCE = "benchmarks/results/ig_reference.json"
IG_REFERENCE_TABLE = Table(
    "docs/inversion-attacks.md", {"data": IG_REFERENCE},
    rows=Loop("name, case", "data.cases", where="case.frames", let={
        "ours": "case.frames.*.ours.rgb_psnr|mean", "theirs": "case.frames.*.breaching_final.rgb_psnr|mean"}),
    columns=(Col("case", "`{name}`"), Col("iterations", "{case.iterations:,}"), Col("TV", "{case.tv:.1f}"),
             Col("signed", "{case.signed|yesno}"), Col("frames", "{case.frames|len}"),
             Col("max abs pixel diff", "{case.frames.*.max_abs_diff_unit|max:.2g}"),
             Col("mean abs pixel diff", "{case.frames.*.mean_abs_diff_unit|mean:.2g}"),
             Col("control: ours vs ours, gradient x (1 + 1e-6 noise)",
                 "{case.frames.*.self_mean_abs_diff_unit?|mean:.3f}"),
             Col("RGB PSNR ours", "{ours:.2f}"), Col("RGB PSNR breaching", "{theirs:.2f}"),
             Col("diff", "{ours|minus(theirs):+.2f}"),
             Col("breaching's returned (lowest-loss) iterate", "{case.frames.*.breaching_returned.rgb_psnr|mean:.2f}"),
             Col("CPU s / frame ours", "{case.frames.*.ours_cpu_s|mean:.1f}"),
             Col("CPU s / frame breaching", "{case.frames.*.breaching_cpu_s|mean:.1f}")))

IG_REFERENCE_LOSS = Table(
    "docs/inversion-attacks.md", {"data": IG_REFERENCE},
    rows=Loop("a", "data.loss_agreement?"),
    columns=(Col("frame", "{a.frame}"), Col("images", "{a.points}"),
             Col("loss, abs. diff", "{a.max_loss_abs_diff:.1e}"),
             Col("image gradient, rel. L2: ours vs breaching", "{a.max_grad_rel_l2_diff:.1e}"),
             Col("ours vs float64", "{a.max_grad_rel_l2_diff_ours_vs_float64:.1e}"),
             Col("breaching vs float64", "{a.max_grad_rel_l2_diff_breaching_vs_float64:.1e}"),
             Col("pixels with opposite gradient sign", "{a.max_grad_sign_disagreement:.2%}"),
             Col("... among components > 1e-3 max", "{a.max_grad_sign_disagreement_large:.3%}")))

# ------------------------------------------------------------------ TSP (docs/tsp.md)

TSP_RESULTS = Table(
    "docs/tsp.md", {"table": "benchmarks/results/tsp_eval.json"},
    rows=Loop("label, run", "table"),
    columns=(Col("run", "{label}"), Each("metric, label", (
        ("action_accuracy", "actions"), ("ate", "ATE"), ("ate_aligned", "ATE aligned"), ("hausdorff", "Hausdorff"),
        ("hausdorff_aligned", "Hausdorff aligned"), ("frechet_aligned", "Frechet aligned"),
        ("dtw_error_aligned", "DTW aligned"), ("keypoint_hit_rate_aligned", "key points aligned"),
        ("room_sequence_accuracy_aligned", "rooms aligned")), (
        Col("{label}", When("m|given", "{m.mean?:.2f} ({m.control?.mean?:.2f})")),), let={"m": "run.metrics[metric]?"}),
        Col("ms/step", "{run.ms_per_frame?:.1f}"), Col("fit s", "{run.fit_seconds?:.0f}")))

# ------------------------------------------------------------------ TRACE (docs/trace.md)

TRACE_PER_TIMESTEP = Table(
    "docs/trace.md", {"data": "docs/trace_per_timestep.json"},
    rows=Loop("victim, attacks", "data", then=Loop("attack, curve", "attacks")),
    columns=(Col("victim", "{victim|upper}"),
             Col("attack", When("attack|eq('trace_control')", "`trace` control", "`{attack}`")),
             Each("t", "data.*.*.mean|each('len')|max|range(1)", (
                 Col(When("t|eq(1)", "t=1", "{t}"), "{curve.mean[t|minus(1)]?:.2f}"),))))

# per defense: RGB PSNR and action accuracy of the non-adaptive and the adaptive attacker, the best prior, each
# one's leakage over its strongest reference (named), and the paper's claim for that defense family
TRACE_ADAPTIVE_ROWS = Loop("defense", "data.defenses", let={"setting": "data.defense_args[defense]|join(' ')"},
                           then=Loop("who", ("non-adaptive", "adaptive"), where="cell", let={
                               "cell": "data.cells['{defense}/{who}'|fill]?", "psnr": "cell.metrics?.rgb_psnr?",
                               "action": "cell.metrics?.action_accuracy?"}))
TRACE_ADAPTIVE_COLUMNS = (
    Col("defense", "`{setting}`"), Col("attacker", "{who}"), Col("RGB PSNR dB [95% CI]", "{psnr|interval}"),
    Col("best RGB prior", When("psnr.best_prior?", "{psnr.best_prior|prior} {psnr.best_prior_score.mean:.3g}")),
    Col("RGB leakage vs strongest reference", When("psnr|strongest", "{psnr|strongest|.reference_leakage|interval} "
                                                                     "({psnr|strongest|.name})")),
    Col("action accuracy", "{action|interval}"),
    Col("action leakage vs strongest reference", When("action|strongest", "{action|strongest|.reference_leakage|interval} "
                                                                            "({action|strongest|.name})")),
    Col("the paper's claim", When("who|eq('adaptive')", "", "{data.paper_claims[defense]?|default('')}")))

TRACE_SPEED = "benchmarks/results/trace.json"
TRACE_SPEED_TABLE = Table(
    "docs/trace.md", {"data": TRACE_SPEED},
    rows=Loop("name, label", (
        ("trace", "`trace` (window 8, key/value cache)"),
        ("trace_seq4", "`trace_seq4` (one window per frame, no cache)"),
        ("trace_no_temporal", "`trace_no_temporal` (no second pass in scheduled sampling)")),
        let={"inf": "data.inference[name]", "train": "data.training[name]"}),
    columns=(Col("attack", "{label}"), Col("ms / frame, 1 thread (wall)", "{inf.ms_per_frame_1_threads:.1f}"),
             Col("CPU ms / frame, 1 thread", "{inf.cpu_ms_per_frame_1_threads:.1f}"),
             Col("of which gradient features", "{inf.feature_ms_per_frame_1_threads:.1f}"),
             Col("training, teacher forcing", "{train.teacher_forcing_sequences_per_s_1_thread:.1f} sequences/s"),
             Col("training, scheduled sampling",
                 "{train.scheduled_sampling_sequences_per_s_1_thread:.1f} sequences/s")))

# TRACE's data-size run (benchmarks/trace_data_curve.py): per encoder and sequence count, the last epoch's val
# PSNR and action accuracy against the best prior on the same frames, the CPU and wall time of its calls; then
# per encoder the log-linear fit evaluated at the paper's data sizes (an extrapolation)
TRACE_DATA_CURVE = Table(
    "docs/trace.md", {"data": "docs/data/trace_data_curve.json"}, let={"encoders": ("learned", "analytic")},
    rows=(Loop("key, p", "data.points", order=("p.encoder|rank(encoders)", "p.sequences"),
               where="p.epochs_done",  # a run in progress: its points not started yet have no row
               let={"last": "p.history|last"},
               cells=("{p.encoder}", "{p.sequences}", "{p.epochs_done} of {p.epochs_planned}",
                      "{last.val_psnr_autoregressive:.2f}",
                      "{last.val_psnr_autoregressive|minus(data.prior.best_psnr_db):+.2f}",
                      "{last.val_action_accuracy:.3f}", "{p.calls.*.cpu_seconds|sum:.0f}",
                      "{p.calls.*.wall_seconds|sum:.0f}")),
          Loop("encoder, fit", "data.extrapolation", where="encoder|among(encoders)",
               order=("encoder|rank(encoders)",),
               cells=("{encoder}, extrapolated", "12,000 / 13,500", "--",
                      "{fit.at_preset_sequences_db:.2f} / {fit.at_paper_sequences_db:.2f}",
                      "{fit.at_paper_sequences_db|minus(data.prior.best_psnr_db):+.2f} "
                      "({fit.db_per_decade:+.3f} dB per decade)", "--", "--", "--"))),
    columns=("encoder", "sequences", "epochs", "val RGB PSNR, last epoch (dB)",
             "- best prior ({data.prior.best|prior} {data.prior.best_psnr_db:.2f} dB)", "val action accuracy",
             "CPU s", "wall s"))

TRACE_METRICS = ("action_accuracy", "rgb_psnr", "rgb_ssim", "rgb_psnr_y", "rgb_ssim@gauss11", "rgb_ms_ssim", "rgb_lpips")
TRACE_ANALYTIC_RUNS = headline("trace_PointNav_ppo_trained", "trace_PointNav_a2c_trained")  # default encoder
TRACE_RUNS = TRACE_ANALYTIC_RUNS + headline("trace_learned_PointNav_ppo_trained")
# TRACE's own setting: both of its NatureCNN algorithms at 84x84, at its budgets (a2c_84 learned at 2.56M, issue 37)
TRACE_84_RUNS = headline("trace_PointNav_ppo_84_trained", "trace_PointNav_a2c_84_trained")

# the headline TRACE cells trained with other attacker seeds (benchmarks/headline_leakage.py --group seeds):
# per seed, each metric and its leakage over the strongest reference (CIs over episodes); then, per metric, the spread
# of the seeds' means, which the CIs over episodes do not contain; per held-out window, how far apart the
# seeds' RGB PSNRs are
SEED_METRICS = ("action_accuracy", "rgb_psnr", "rgb_ssim@gauss11")
SEEDS_ROWS = (Loop("run", "runs"), Row(("mean (min-max) over seeds", Each("metric", SEED_METRICS, (
    "{means|mean:.4g} ({means|min:.4g}-{means|max:.4g})", "{leaks|mean:+.3g} ({leaks|min:+.3g} to {leaks|max:+.3g})"),
    let={"means": "runs.*.metrics[metric].mean",
         "leaks": "runs.*.metrics[metric]|each('strongest')|each('oriented', 'reference_leakage')|.*.mean"}),
    "--", "--")))
SEEDS_COLUMNS = (Col("attacker seed", "{run.attack_params.seed?|default(0)|int}"), Each("metric", SEED_METRICS, (
    Col("`{metric}` [95% CI]", "{run.metrics[metric]|interval}"),
    Col("vs strongest reference [95% CI]",
        "{run.metrics[metric]|strongest|oriented('reference_leakage')|interval('+.3g')} "
        "({run.metrics[metric]|strongest|.name})"))),
    Col("fit min", "{run.fit_seconds?|per(60):.0f}"), Col("episodes", "{run.n_episodes}"))
SEEDS_NOTE = ("Per window, the range of `rgb_psnr` over the {runs|len} seeds: {ranges|median:.2f} dB at the "
              "median window, {ranges|max:.2f} dB at the widest ({ranges|len} windows).")
SEEDS_LET = {"ranges": "runs|window_ranges('rgb_psnr')"}

TRACE_PAPER = "docs/data/trace_paper.json"
TRACE_ADAPTIVE_QUICK = "docs/data/trace_adaptive_quick.json"
# each headline claim of the TRACE paper beside our measurement of the same quantity: the undefended runs per
# victim and resolution (quick budget, whole official trace-windows split), the per-frame time, and the
# defended cells of the quick-budget adaptive comparison (non-adaptive and adaptive attacker)
CLAIM = ("{paper.claims[claim].label}", "{paper.claims[claim].paper}")
OURS = ("{m|interval}", When("m|strongest", "{m|strongest|.name} {m|strongest|.mean:.3g}"), STRONGEST_LEAKAGE, "{n}")
TRACE_VS_PAPER = Table(
    "docs/trace.md", {"paper": TRACE_PAPER, "speed": TRACE_SPEED, "adaptive": TRACE_ADAPTIVE_QUICK,
                      "runs": TRACE_ANALYTIC_RUNS + TRACE_84_RUNS},
    rows=(Loop("claim", ("rgb_psnr", "action_accuracy"), then=Loop(
              "run", "runs", let={"m": "run.metrics[claim]?", "n": "run.n_episodes",
                                  "size": "run.image_size?|default(64)"},
              cells=(*CLAIM, "{run.victim} {run.checkpoint}, {size}x{size}, {run.budget}", *OURS))),
          Row(("{paper.claims.ms_per_frame.label}", "{paper.claims.ms_per_frame.paper}",
               "`trace`, window 8, one CPU thread (`benchmarks/bench_trace.py`)",
               "{speed.inference.trace.ms_per_frame_1_threads:.1f} ms wall, "
               "{speed.inference.trace.cpu_ms_per_frame_1_threads:.1f} ms CPU", "--", "--", "--")),
          Loop("defense, claim", (("topk", "topk"), ("quantize", "quantize"), ("gaussian_noise", "gaussian_noise"),
                                  ("gaussian_noise_strong", "gaussian_noise"), ("dp_sgd", "dp_sgd")),
               let={"setting": "adaptive.defense_args[defense]?|join(' ')"},
               then=Loop("who", ("non-adaptive", "adaptive"), where="cell",
                         let={"cell": "adaptive.cells['{defense}/{who}'|fill]?"},
                         then=Loop("metric", ("action_accuracy", "rgb_psnr"),
                                   let={"m": "cell.metrics[metric]?", "n": "cell.n_episodes"},
                                   cells=(*CLAIM, "`{setting}`, {who}, {metric}, ppo trained 64x64, quick", *OURS))))),
    columns=("claim", "the paper", "ours: setting", "ours [95% CI]", "strongest reference",
             "ours - strongest reference [95% CI]", "episodes"))

# TRACE's resolution beside ours (benchmarks/headline_leakage.py --group resolution): the headline columns with
# the camera resolution first, and the attack's time per frame (one thread; the load is in each file). Runs
# recorded before the 84x84 victims existed carry no ``image_size``: they were all at 64.
RESOLUTION_ROWS = Loop("run", "runs", let={"size": "run.image_size?|default(64)", "ms": "run.ms_per_frame?"},
                       then=RUN_METRICS.then)
RESOLUTION_COLUMNS = (
    Col("resolution", "{size}x{size}"), Col("attack", RUN), Col("task/victim/checkpoint", WHO), *HEADLINE[:-1],
    Col("episodes (frames)", "{n} ({run.n_frames} frames)"),
    Col("ms / frame", When("ms|real", When("ms|ge(10)", "{ms:.0f}", "{ms:.2g}"))),
    Col("load at start (2 cores)", "{run.machine_before.load_average.0:.1f}"))
# each 84x84 run after its 64x64 counterpart, every victim at init, then trained
RESOLUTION_CLOSED_FORM_RUNS = headline(
    "closed_form_PointNav_ppo_init", "closed_form_PointNav_ppo_84_init", "closed_form_PointNav_a2c_init",
    "closed_form_PointNav_a2c_84_init", "closed_form_PointNav_ppo_trained", "closed_form_PointNav_ppo_84_trained",
    "closed_form_PointNav_a2c_trained", "closed_form_PointNav_a2c_84_trained")
RESOLUTION_IG_RUNS = headline("ig6_PointNav_ppo_init", "ig6_PointNav_ppo_84_init")

# ------------------------------------------------------------------ priors and calibrated leakage (docs/priors.md)

PRIORS_PPO_INIT = "docs/data/priors_PointNav_ppo_init.json"
# one row per metric: the best prior with its CI, then every prior's mean
PRIORS_ROWS = Loop("metric, entry", "data.metrics", where="metric|among(only)")
PRIORS_COLUMNS = (
    Col("metric", "`{metric}`"), Col("better", "{entry.higher_is_better|yesno('higher', 'lower')}"),
    Col("best prior", "{entry.best_prior|prior}"),
    Col("its score [95% CI]", "{entry.priors[entry.best_prior]|interval}"),
    Col("the other priors (mean)", Join("name, s", "entry.priors", "{name|prior} {s.mean:.3g}", empty="--",
                                        where=("name|ne(entry.best_prior)", "s.mean?|real"))))
IMAGE_AND_ACTION = ("action_accuracy", "rgb_psnr", "rgb_ssim", "rgb_psnr_y", "rgb_ssim_y", "rgb_ssim@gauss11",
                    "rgb_ms_ssim", "rgb_lpips", "depth_psnr", "depth_ssim")

PRIORS_COST = Table(
    "docs/priors.md", {"data": PRIORS_PPO_INIT}, let={"fit": "data.fit", "over": "data.overhead?"},
    rows=(Row(("fit, reading or simulating the train episodes (episodes / steps)",
               "{fit.fit_seconds:.1f} s ({fit.n_episodes} / {fit.n_steps})")),
          Row(("load from the cache", "{fit.warm_load_seconds|times(1000):.1f} ms")),
          Row(("apply every prior, per held-out episode", "{data.apply_ms_per_episode:.1f} ms")),
          Row(("score {data.n_references} priors x {data.n_metrics} metrics, per episode (first run on a dataset; "
               "cached after)", "{data.score_ms_per_episode:.0f} ms")),
          Row(("machine", "{data.machine.cpus} cores, load average {data.machine.load_average:.1f}, "
                          "OMP_NUM_THREADS={data.machine.omp_num_threads}")),
          Row(("warm `evaluate {over.attack}` on {over.episodes} episodes without priors (median of 3)",
               "{over.without_priors_s|median:.1f} s"), when="over"),
          Row(("what the priors add to it: build {over.fields|len}-field references, read their cached scores, "
               "summarise", "{over.build_references_s:.2f} + {over.score_references_s:.2f} + "
                            "{over.summary_extra_s:.2f} s = {over.added_s:.2f} s ({over.overhead|times(100):.1f}%)"),
              when="over"),
          Row(("the first run with priors on this dataset (their scores computed and cached)",
               "{over.first_with_priors_s:.1f} s"), when="over")),
    columns=("what", "cost"))

# per run and metric: the attack, the best prior, the swap control, leakage over the stronger (the headline)
CALIBRATED_ROWS = Loop("run", "runs", then=Loop("metric, m", "run.metrics"))
CALIBRATED_COLUMNS = (Col("attack", "`{run.attack}`"), Col("metric", "`{metric}`"),
                      Col("attack [95% CI]", "{m|interval}"), Col("best prior", REFERENCE_BEST),
                      Col("swap control", "{m.control?|interval}"), Col("strongest reference", STRONGEST),
                      Col("leakage vs strongest reference [95% CI]", STRONGEST_LEAKAGE))

# one column per reconstructed field, the metric that stands for it: whether each run leaks it beyond the
# strongest reference (the verdict's mark and the oriented leakage over it)
LEAK_MARK = When("m|verdict(run|scored(metric))|contains('too few')", "{m|verdict(run|scored(metric))}",
                 "{m|verdict(run|scored(metric))|rename(marks)} "
                 "{m|strongest|oriented('reference_leakage')|interval('+.3g')}")
SUMMARY = Each("field, metric", (
    ("actions", "action_accuracy"), ("RGB PSNR", "rgb_psnr"), ("RGB SSIM", "rgb_ssim"), ("depth PSNR", "depth_psnr"),
    ("box IoU (visible)", "bbox_iou@visible"), ("Q target", "q_target_rel_error"), ("return", "return_abs_error"),
    ("trajectory ATE", "ate"), ("path shape (Frechet, aligned)", "frechet_aligned")), (
    Col("{field} (`{metric}`)", When("m|given", When("m|strongest", LEAK_MARK, ""), ""),
        optional=True),), let={"m": "run.metrics[metric]?"})

# ------------------------------------------------------------------ headline reruns (benchmarks/headline_leakage.py)

# every victim at init and trained, but reinforce's trained checkpoint, which did not learn (not published)
CLOSED_FORM_RUNS = headline(*(f"closed_form_{task}_{victim}_{ck}"
                              for task, victims in (("PointNav", ("ppo", "a2c", "ppo_compact")),
                                                    ("ActivePerception", ("dqn", "reinforce", "dqn_compact",
                                                                          "reinforce_convdepth")))
                              for victim in victims for ck in ("init", "trained")
                              if (victim, ck) != ("reinforce", "trained")))
INVERSION_RUNS = headline("ig_PointNav_ppo_init", "ig_ActivePerception_dqn_init", "dlg_ActivePerception_dqn_init",
                          "idlg_ActivePerception_dqn_init", "qgi_adam_ActivePerception_dqn_init",
                          "qgi_cf_ActivePerception_dqn_init", "rgi_adam_ActivePerception_reinforce_init",
                          "rgi_cf_ActivePerception_reinforce_init",
                          "rgi_adam_ActivePerception_reinforce_convdepth_init",
                          "rgi_cf_ActivePerception_reinforce_convdepth_init",
                          "rgi_adam_ActivePerception_reinforce_convdepth_trained",
                          "rgi_cf_ActivePerception_reinforce_convdepth_trained")
TSP_RUNS = headline("tsp_PointNav_ppo_init", "tsp_PointNav_ppo_trained")
ALL_RUNS = (CLOSED_FORM_RUNS + INVERSION_RUNS + TRACE_RUNS + TSP_RUNS
            + tuple(r for r in RESOLUTION_CLOSED_FORM_RUNS + RESOLUTION_IG_RUNS if r not in CLOSED_FORM_RUNS)
            + TRACE_84_RUNS)
HEADLINE_COLUMNS = (Col("attack", RUN), Col("task/victim/checkpoint", WHO), *HEADLINE)

# ------------------------------------------------------------------ split identity and victims (docs/tasks.md)

# rounding rows: the largest ratio over episodes; change rows: the smallest. ``~0``: below 0.001, the field is
# not changed by that change (what remains is the record's 9-digit rounding of the sketch)
RATIO = When("r|given", When("r|ge(0.001)", "{r:.2g}", "~0"))
SPLIT_IDENTITY = dict(
    let={"fields": "data.rounding.*.max_ratio|each('keys')|flat|unique|sorted"},
    rows=(Loop("name, row", "data.rounding"),
          Loop("name, row", "data.real_changes", cells=(
              "change: {name}", Each("f", "fields", (RATIO,), let={"r": "row.min_ratio[f]?"})))),
    columns=(Col("RMS difference / tolerance",
                 "rounding: {name} (identity {row.identity_equal|yesno('equal', 'DIFFERENT')}, "
                 "{row.bit_identical_episodes}/{data.sampling_without_replay[name].episodes} episodes bit-identical)"),
             Each("f", "fields", (Col("`{f}`", RATIO),), let={"r": "row.max_ratio[f]?"})))

# the committed validation of every victim (gradleak-bench validate-victim; issue 31), in the zoo's order: val
# success (Wilson 95%) and mean return (bootstrap 95%) of the random policy, init and trained on the same
# episodes, and the rule's verdict (gradleak_bench/victims/validation.py)
VICTIM_VALIDATION = tuple(f"envs/checkpoints/{key}/validation.json" for key in (
    "PointNav/ppo", "PointNav/ppo_compact", "PointNav/a2c", "PointNav/ppo_84", "PointNav/a2c_84",
    "ActivePerception/dqn", "ActivePerception/reinforce", "ActivePerception/reinforce_convdepth",
    "ActivePerception/dqn_compact", "ActivePerception/dqn_150", "ActivePerception/reinforce_150",
    "ActivePerception/reinforce_convdepth_150",
    "PointNavContinuous/ppo_gaussian", "PointNavContinuous/sac"))

# ------------------------------------------------------------------ defenses (docs/defenses.md)

# settings as rows; per (victim, attack, metric) column group: the metric, leakage over the strongest reference
# [CI] (named) and over the best prior [CI] (named); a cell not run reads x, one skipped -
GRID_MARK = When("c.status?|eq('skipped')", "-", "x")
GRID_ROWS = Loop("setting", "data.cells.*.setting|unique")
GRID_LET = {"c": "data.cells|find('victim', victim, 'attack', attack, 'setting', setting)",
            "ok": "c.status?|eq('ok')", "m": "c.metrics?[metric]?"}
GRID_GROUP = (
    Col("{label}", When("ok", When("m|given", "{m.mean:.3f}"), GRID_MARK)),
    Col("{label}: leakage vs strongest reference", When("ok", When("m|given", When(
        "m|strongest", "{m|strongest|.reference_leakage|interval} ({m|strongest|.name})")), GRID_MARK)),
    Col("{label}: vs best prior", When("ok", When("m|given", When(
        "m.best_prior?", "{m.prior_leakage?|interval} ({m.best_prior|prior})")), GRID_MARK)))

# one row per setting: val return after fine-tuning (mean ± sd over seeds), its cost against the undefended
# fine-tuning paired by seed (95% t-interval over seeds; resolved when it excludes 0), and the leakage over the
# best prior of the same checkpoint's release on each axis (closed-form actions, TRACE actions), with whether
# the setting is on that axis's Pareto frontier; rows not yet run say so
RUN_YET = "r.n_seeds"
FRONTIER = Table(
    "docs/defenses.md", {"data": "docs/data/frontier/pointnav_ppo.json"},
    let={"axis_names": ("closed_form", "closed-form", "trace", "TRACE"), "axes": "data.leakage_sources|keys"},
    rows=Loop("r", "data.rows"),
    columns=(Col("setting", "`{r.setting}`"), Col("seeds", When(RUN_YET, "{r.n_seeds}", "0")),
             Col("val return (mean ± sd)", When(RUN_YET, When("r.val_return_sd|given",
                                                                "{r.val_return:.3f} ± {r.val_return_sd:.3f}",
                                                                "{r.val_return:.3f}"), "not run yet")),
             Col("val success", When(RUN_YET, "{r.val_success:.3f}", "")),
             Col("cost in return [95% CI over seeds]", When(RUN_YET, "{r.cost|interval('.3f')}", "")),
             Col("cost resolved?", When(RUN_YET, When("r.cost_resolved", "**yes**", "no"), "")),
             Each("a", "axes", (
                 Col("{a|rename(axis_names)} action leakage over best prior [95% CI]",
                     When("lk", "{lk|interval('.3f')}")),), let={"lk": "r.leakage?[a]?"}),
             Col("on frontier", When(RUN_YET, Join("a", "axes", "{a|rename(axis_names)}",
                                                   where="r.on_frontier?[a]?"), ""))))

DEFENDED_TRAINING = Table(
    "docs/defenses.md", {"data": "benchmarks/results/bench_defended_training.json"},
    rows=Loop("key, label", (
        ("sb3", "plain SB3"), ("none (mean path)", "`none` (mean path)"),
        ("dp_sgd norms path, train_noise=mean", "`dp_sgd(C=1, sigma=1, train_noise=mean)` (norms path)"),
        ("dp_sgd norms path, per-sample draws", "`dp_sgd(C=1, sigma=1)` (norms path, per-sample noise draws)"),
        ("dp_sgd per-sample path (old)", "`dp_sgd(C=1, sigma=1)` forced onto the per-sample path"),
        ("quantize 8 bit (per-sample path)", "`quantize(bits=8)` (per-sample path, `release_mean`)"),
        ("topk keep=0.1 (per-sample path)", "`topk(keep=0.1)` (per-sample path, `release_mean`)")),
        let={"r": "data.training[key]?"}, where="r|given"),
    columns=(Col("path", "{label}"), Col("wall s", "{r.wall_s:.1f}"), Col("x SB3", "{r.wall_x_sb3:.2f}"),
             Col("CPU s", "{r.cpu_s:.1f}"), Col("x SB3", "{r.cpu_x_sb3:.2f}")),
    more=(Grid(rows=Loop("key, r", "data.per_update"),
               columns=(Col("one 64-frame minibatch update", "{key}"), Col("ms", "{r.ms:.1f}"),
                        Col("x SB3", "{r.x_sb3:.2f}"))),),
    note="{data.budget} steps per training run, {data.machine.threads} torch thread, torch {data.machine.torch}, "
         "{data.machine.cpus} CPUs; 1-minute load average {data.machine.load_before.0:.2f} before, "
         "{data.machine.load_after.0:.2f} after.")

# one row per defense run: action accuracy, the best prior, the swap control, the leakage over the stronger
DEFENSES_CLOSED_FORM = Table(
    "docs/defenses.md", {"table": "docs/data/defenses_closed_form_PointNav_ppo_init.json"},
    rows=Loop("run", "table", let={"m": "run.metrics.action_accuracy"}),
    columns=(Col("defense", "`{run.defense}`"),
             Col("`-D`", When("run.defense_epsilon?|given",
                              "`{run.params|join(' ')} (epsilon {run.defense_epsilon:.3g} per step)`",
                              When("run.params", "`{run.params|join(' ')}`", ""))),
             Col("action accuracy [95% CI]", "{m|interval}"), Col("best prior", REFERENCE_BEST),
             Col("swap control", "{m.control?|interval}"), Col("strongest reference", STRONGEST),
             Col("leakage vs strongest reference", STRONGEST_LEAKAGE)))

# ------------------------------------------------------------------ continuous actions (docs/continuous-actions.md)

CONTINUOUS = Table(
    "docs/continuous-actions.md", {"data": "benchmarks/results/continuous_pipeline.json"},
    let={"defenses": ("none", "gaussian_noise", "topk")},
    rows=Loop("unit", "data.units", let={"u": "unit.unit", "m": "unit.metrics", "mae": "unit.metrics.action_mae?",
                                        "sign": "unit.metrics.action_sign_accuracy?"},
              order=("unit.unit.attack|ne('closed_form_gaussian')", "unit.unit.victim",
                     "unit.unit.checkpoint|ne('init')", "unit.unit.defense|rank(defenses)", "unit.unit.defense")),
    columns=(Col("attack", "`{u.attack}`"), Col("victim", "{u|who('PointNavContinuous')}"),
             Col("defense", When("u.defense_params", (
                 "`{u.defense}` (", Join("k, v", "u.defense_params", "{k} {v:g}"), ")"), "`{u.defense}`")),
             Col("action MAE [95% CI]", "{mae|interval}"),
             Col("best prior (MAE)", "{mae.best_prior?|or('--')|prior} {mae.best_prior_mean?:.3f}"),
             Col("swap control (MAE)", "{mae.control_mean?:.3f}"),
             Col("leakage vs strongest reference (MAE)",
                 When("mae|strongest", "{mae|strongest|.reference_leakage|interval} over {mae|strongest|.name}")),
             Col("linear abs. err.", "{m.action_linear_ae?|interval}"),
             Col("angular abs. err.", "{m.action_angular_ae?|interval}"),
             Col("sign accuracy", "{sign|interval('.3f')}"),
             Col("sign: strongest reference", When("sign|strongest", "{sign|strongest|.name} {sign|strongest|.mean:.3f}")),
             Col("RGB PSNR (dB)", "{m.rgb_psnr?|interval('.2f')}"), Col("wall s", "{unit.wall_seconds:.0f}"),
             Col("fit s", "{unit.fit_seconds?:.0f}")))

# ------------------------------------------------------------------ evaluate speed (docs/evaluate.md)

# one row per figure of a benchmarks/bench_evaluate.py results file: wall and CPU medians with every run and
# the load around them
EVALUATE_SPEED = dict(
    let={"before": "data.before?.commit?|default('before')", "now": "data.commit"},
    rows=Loop("label, key", (
        ("code of {before}, warm", "before_evaluate_warm"), ("**code of {now}, warm**", "evaluate_warm"),
        ("code of {now}, caches of the card and read gradients removed before each run (recomputed)",
         "evaluate_warm_recomputed"),
        ("code of {now}, warm, `--wandb disabled`", "evaluate_warm_wandb_disabled"),
        ("code of {before}, warm, `--defense clip_norm -D C=1`", "before_evaluate_warm_defended"),
        ("code of {now}, warm, `--defense clip_norm -D C=1`", "evaluate_warm_defended"),
        ("code of {before}, one busy neighbour", "before_evaluate_busy_neighbour"),
        ("**code of {now}, one busy neighbour**", "evaluate_busy_neighbour"),
        ("code of {now}, resume of a finished run (nothing to score)", "evaluate_resume"),
        ("code of {now}, `--episodes 1`", "evaluate_warm_episodes_1"),
        ("code of {now}, `--episodes 12`", "evaluate_warm_episodes_12"),
        ("code of {now}, `--episodes 48`", "evaluate_warm_episodes_48"),
        ("`gradleak-bench --help`", "import_cli")), let={"fig": "data[key]?"}, where="fig"),
    columns=(Col("`evaluate closed_form`, default split (48 episodes), W&B offline", "{label|fill}"),
             Col("wall s, median (runs)", "**{fig.median_s:.2f}** ({fig.wall_runs_s|join(', ', '.2f')})"),
             Col("CPU s, median", "{fig.cpu_median_s:.2f}"),
             Col("1-min load", When("fig.load_range?|given", "{fig.load_range.0:.2f}-{fig.load_range.1:.2f}",
                                    "{fig.load_before:.2f}-{fig.load_after:.2f}"))),
    note=("{data.threads} torch thread, {data.cpu?|default('CPU model not recorded')} ({data.cpus} CPUs), "
          "{data.date}; CPU = user + sys of the whole process tree ({data.cpu_accounting}).",
          When("data.busy_neighbour_ratio?", "One busy neighbour / alone: **{data.busy_neighbour_ratio.wall:.2f}** "
                                             "wall, {data.busy_neighbour_ratio.cpu:.2f} CPU.", ""),
          When("data.fit?", "Least squares over `--episodes` 1, 12, 48: **{data.fit.fixed_s:.2f} s "
                            "{data.fit.per_episode_s|times(1000)|spaced_sign('.0f')} ms per episode** of wall (CPU "
                            "{data.fit.cpu_fixed_s:.2f} s {data.fit.cpu_per_episode_s|times(1000)|spaced_sign('.0f')} "
                            "ms).", ""),
          When("data.replay_ms_per_8_step_episode?",
               "Recomputing one 8-step episode's exact gradients in one process: "
               "**{data.replay_ms_per_8_step_episode.median_ms:.1f} ms** wall, "
               "{data.replay_ms_per_8_step_episode.cpu_median_ms:.1f} ms CPU (median of "
               "{data.replay_ms_per_8_step_episode.episodes}).", "")))

IMPORT_COSTS = Table(
    "docs/evaluate.md", {"data": "benchmarks/results/bench_imports.json"},
    rows=Loop("name, label", (
        ("import_torch", "`import torch`"), ("import_pandas", "`import pandas`"),
        ("import_scipy_special", "`import scipy.special` (numpy loaded)"),
        ("import_wandb", "`import wandb` (pandas kept out)"),
        ("wandb_init_with_launch_inputs", "offline `wandb.init`, Launch inputs applied (wandb's default)"),
        ("wandb_init_without_launch_inputs", "offline `wandb.init`, Launch inputs skipped (the W&B process here)")),
        let={"p": "data.probes[name]?"}, where="p|given"),
    columns=(Col("in a fresh process", "{label}"), Col("CPU s, median", "{p.cpu_median_s:.2f}"),
             Col("wall s, median", "{p.wall_median_s:.2f}")),
    note="{data.cpu} ({data.cpus} CPUs), 1 thread, median of {data.repeats}, {data.date}; 1-minute load average "
         "{data.load_before:.2f} before, {data.load_after:.2f} after.")

# ------------------------------------------------------------------ the tables, by marker name

TABLES: dict[str, Table] = {
    "per_sample_speed": Table(
        "docs/gradient-stream.md", {"b8": "benchmarks/results/bench_per_sample_b8.json",
                                    "b64": "benchmarks/results/bench_per_sample.json"},
        rows=Loop("method, label, mark", (
            ("engine (out=)", "engine, `out=` preallocated", "**"),
            ("engine (fresh)", "engine, fresh outputs (default call)", ""),
            ("engine vmap", "engine, `vmap` reference path", ""),
            ("opacus", "Opacus 1.6 `GradSampleModule`", ""),
            ("python loop", "Python loop of single-sample backwards", ""),
            ("batched backward", "one batched backward of the mean loss (floor)", "")),
            let={"small": "b8.results[method]", "large": "b64.results[method]"}),
        columns=(Col("method", "{label}"), Col("batch 8 (one episode): ms", "{small.ms:.1f}"),
                 Col("x floor", "{small.ratio_to_floor:.2f}"), Col("batch 64: ms", "{large.ms:.1f}"),
                 Col("x floor", "{mark}{large.ratio_to_floor:.2f}{mark}"),
                 Col("peak MiB (batch 64)", "{large.peak_rss_growth_mib:.0f}"),
                 Col("max rel err (batch 64)", "{large.max_rel_err_vs_vmap:.1e}")),
        note="{b64.setup.threads} thread, median of {b64.setup.repeats}, torch {b64.setup.torch}, "
             "{b64.setup.cpu?|default(b64.setup.machine)}; 1-minute load average "
             "{b8.setup.load_average_before.0:.2f} / {b64.setup.load_average_before.0:.2f} before the batch 8 / 64 "
             "runs."),
    "inversion_table1": TABLE1,
    "inversion_ablation": ABLATION,
    "inversion_speed": INVERSION_SPEED,
    "budget_curves": BUDGET_CURVES_TABLE,
    "budget_costs": BUDGET_COSTS,
    "budget_frames": BUDGET_FRAMES_TABLE,
    "qgi_paper_gap": GAP_TABLE,
    "qgi_paper_gap_arms": GAP_ARMS_TABLE,
    "qgi_paper_gap_frames": GAP_FRAMES_TABLE,
    "ig_reference": IG_REFERENCE_TABLE,
    "ig_reference_loss": IG_REFERENCE_LOSS,
    "tsp_results": TSP_RESULTS,
    "trace_speed": TRACE_SPEED_TABLE,
    "trace_per_timestep": TRACE_PER_TIMESTEP,
    "trace_data_curve": TRACE_DATA_CURVE,
    "trace_adaptive": Table("docs/trace.md", {"data": "docs/data/trace_adaptive.json"},
                            rows=TRACE_ADAPTIVE_ROWS, columns=TRACE_ADAPTIVE_COLUMNS),
    "trace_adaptive_quick": Table("docs/trace.md", {"data": TRACE_ADAPTIVE_QUICK},
                                  rows=TRACE_ADAPTIVE_ROWS, columns=TRACE_ADAPTIVE_COLUMNS),
    "closed_form_margin": Table(  # rows (checkpoint, beta) in file order; per entropy coefficient the accuracies
        "docs/closed-form.md", {"data": "benchmarks/results/closed_form_margin.json"},
        rows=Loop("g", "data.results|group('checkpoint', 'beta')"),
        columns=(Col("checkpoint", "{g.0.checkpoint}"), Col("beta", "{g.0.beta:g}"),
                 Col("mean entropy (nats)", "{g.0.steps.*.entropy|mean:.3f}"),
                 Each("c", "data.results.*.ent_coef|unique|sorted", (
                     Col("ent_coef {c:g}", When("r", "{r.accuracy:.3f} / {r.accuracy_signed:.3f}")),),
                     let={"r": "g|find('ent_coef', c)"}))),
    "defenses_closed_form": DEFENSES_CLOSED_FORM,
    "priors_scores": Table("docs/priors.md", {"data": PRIORS_PPO_INIT}, let={"only": "data.metrics|keys"},
                           rows=PRIORS_ROWS, columns=PRIORS_COLUMNS),
    "priors_scores_trained": Table("docs/priors.md", {"data": "docs/data/priors_PointNav_ppo_trained.json"},
                                   let={"only": IMAGE_AND_ACTION}, rows=PRIORS_ROWS, columns=PRIORS_COLUMNS),
    "priors_scores_a2c_trained": Table("docs/priors.md", {"data": "docs/data/priors_PointNav_a2c_trained.json"},
                                       let={"only": IMAGE_AND_ACTION}, rows=PRIORS_ROWS, columns=PRIORS_COLUMNS),
    "priors_cost": PRIORS_COST,
    "calibrated_runs": Table("docs/priors.md", {"runs": (
        "docs/data/evaluations/PointNav_ppo_init_closed_form_8.json",
        "docs/data/evaluations/PointNav_ppo_init_inverting_gradients_quick_8.json")},
        rows=CALIBRATED_ROWS, columns=CALIBRATED_COLUMNS),
    "calibrated_qgi": Table("docs/priors.md", {"runs": (
        "docs/data/evaluations/ActivePerception_dqn_init_qgi_closed_form_8.json",)},
        rows=CALIBRATED_ROWS, columns=CALIBRATED_COLUMNS),
    "split_identity_margins": Table(
        "docs/tasks.md", {"data": "benchmarks/results/split_identity_margins.json"}, **SPLIT_IDENTITY),
    "split_identity_margins_84": Table(  # the 84x84 victim's split
        "docs/tasks.md", {"data": "benchmarks/results/split_identity_margins_ppo_84.json"}, **SPLIT_IDENTITY),
    # per PointNav victim and checkpoint: success on these val episodes, the policy's mean entropy and mean
    # probability of each action at the states it visits (benchmarks/victim_behaviour.py)
    "victim_behaviour": Table(
        "docs/tasks.md", {"data": "docs/data/victim_behaviour.json"},
        rows=Loop("r", "data.rows"),
        columns=(Col("victim", "`{r.victim}`"), Col("checkpoint", "{r.checkpoint}"),
                 Col("camera", "{r.image_size}x{r.image_size}"),
                 Col("val success (episodes)", "{r.success_rate:.1%} ({r.episodes})"),
                 Col("mean entropy (uniform {data.rows.0.uniform_entropy:.3f})", "{r.mean_entropy:.3f}"),
                 Each("a", "data.rows.0.mean_probability|keys", (Col("P({a})", "{r.mean_probability[a]:.3f}"),)))),
    # per PointNav victim: val success split by what the start pose's camera shows of the goal
    # (benchmarks/pointnav_goal_visibility.py)
    "pointnav_goal_visibility": Table(
        "docs/tasks.md", {"data": "benchmarks/results/pointnav_goal_visibility.json"},
        rows=Loop("r", "data.rows"),
        columns=(Col("policy", "{r.who}"),
                 Each("c, label", (("in view", "goal in the first frame"), ("turn to see", "seen by turning"),
                                   ("hidden", "hidden from the start"), ("all", "all")), (
                     Col("{label} ({data.rows.0[c].episodes} episodes)",
                         "{r[c].success_rate:.0%} ({r[c].successes})"),)),
                 Col("goal hidden: metres walked (median)", "{r.search.median_walked_m:.1f}"),
                 Col("goal hidden: left the start room", "{r.search.left_start_room:.0%}"))),
    "victim_validation": Table(
        "docs/tasks.md", {"runs": VICTIM_VALIDATION}, skip_missing=True,
        rows=Loop("run", "runs"),
        columns=(Col("victim", "`{run.victim}`"), Col("val episodes", "{run.episodes}"),
                 Each("policy, header", (("random", "random policy"), ("init", "init"), ("trained", "trained")), (
                     Col("{header}", When("p|given", "{p.success_rate:.1%} [{p.success_ci95.0:.1%}, "
                                                     "{p.success_ci95.1:.1%}] ({p.successes}/{p.episodes}); return "
                                                     "{p.mean_return:.2f} [{p.return_ci95.0:.2f}, "
                                                     "{p.return_ci95.1:.2f}]")),),
                     let={"p": "run.policies[policy]?"}),
                 Col("learned", "{run.learned?|yesno('**yes**', 'no')}"))),
    "headline_closed_form": Table("docs/closed-form.md", {"runs": CLOSED_FORM_RUNS}, let={"only": ("action_accuracy",)},
                                  rows=RUN_METRICS, columns=HEADLINE_COLUMNS[1:]),
    "headline_tsp": Table("docs/tsp.md", {"runs": TSP_RUNS}, let={"only": (
        "action_accuracy", "ate", "ate_aligned", "hausdorff", "hausdorff_aligned", "frechet_aligned",
        "dtw_error_aligned", "keypoint_hit_rate", "room_sequence_accuracy", "room_sequence_accuracy_aligned")},
        rows=RUN_METRICS, columns=HEADLINE_COLUMNS),
    "defenses_grid_ap": Table(
        "docs/defenses.md", {"data": "docs/data/grid_ap_frontier.json"}, rows=GRID_ROWS,
        columns=(Col("setting", "`{setting}`"), Each("victim, attack, metric, label", (
            ("dqn_compact", "closed_form", "action_accuracy", "closed_form action acc."),
            ("dqn_compact", "qgi", "rgb_psnr", "qgi RGB PSNR"), ("dqn_compact", "qgi", "depth_psnr", "qgi depth PSNR"),
            ("dqn_compact", "qgi", "bbox_iou", "qgi box IoU")), GRID_GROUP, let=GRID_LET))),
    "headline_inversion": Table("docs/inversion-attacks.md", {"runs": INVERSION_RUNS}, let={"only": (
        "action_accuracy", "rgb_psnr", "rgb_psnr_y", "rgb_ssim_y", "rgb_lpips", "depth_psnr", "depth_ssim", "bbox_iou",
        "bbox_iou@visible", "bbox_detection_rate", "q_value_rel_error", "q_target_rel_error", "return_abs_error")},
        rows=RUN_METRICS, columns=HEADLINE_COLUMNS),
    "headline_trace": Table("docs/trace.md", {"runs": TRACE_RUNS}, let={"only": TRACE_METRICS},
                            rows=RUN_METRICS, columns=HEADLINE_COLUMNS),
    "headline_summary": Table(  # which attack leaks which field beyond the strongest reference
        "docs/priors.md", {"runs": ALL_RUNS},
        let={"marks": ("**leaks**", "**leaks**", "below reference", "below", "no leak (CI spans 0)", "no", "no reference",
                        "")},
        rows=Loop("run", "runs"), columns=(Col("attack", RUN), Col("task/victim/checkpoint", WHO), SUMMARY)),
    "headline_conditions": Table(  # how each run was made: the reruns' provenance
        "docs/priors.md", {"runs": ALL_RUNS}, rows=Loop("run", "runs"),
        columns=(Col("attack", RUN), Col("task/victim/checkpoint", WHO), Col("split", "{run.split}"),
                 Col("episodes", "{run.n_episodes}"), Col("budget", "{run.budget}"),
                 Col("wall s", "{run.wall_seconds:.0f}"), Col("threads", "{run.threads}"),
                 Col("load before / after (2 cores)",
                     "{run.machine_before.load_average.0:.1f} / {run.machine_after.load_average.0:.1f}"),
                 Col("sealed", "{run.sealed|yesno}"))),
    "defenses_grid_pointnav": Table(
        "docs/defenses.md", {"data": "docs/data/grid_pointnav_closed_form.json"}, rows=GRID_ROWS,
        columns=(Col("setting", "`{setting}`"), Each("victim, attack, metric, label", (
            ("ppo", "closed_form", "action_accuracy", "PPO action acc."),
            ("a2c", "closed_form", "action_accuracy", "A2C action acc.")), GRID_GROUP, let=GRID_LET))),
    "frontier_pointnav": FRONTIER,
    "defended_training_cost": DEFENDED_TRAINING,
    "resolution_closed_form": Table("docs/trace.md", {"runs": RESOLUTION_CLOSED_FORM_RUNS},
                                    let={"only": ("action_accuracy",)}, rows=RESOLUTION_ROWS,
                                    columns=RESOLUTION_COLUMNS),
    "resolution_trace": Table("docs/trace.md", {"runs": headline(  # each 84x84 run after its 64x64 counterpart
        "trace_PointNav_ppo_trained", "trace_PointNav_ppo_84_trained", "trace_PointNav_a2c_trained",
        "trace_PointNav_a2c_84_trained")},
                              let={"only": TRACE_METRICS}, rows=RESOLUTION_ROWS, columns=RESOLUTION_COLUMNS),
    "trace_attacker_seeds": Table(
        "docs/trace.md", {"runs": headline("trace_PointNav_ppo_trained",
                                           *(f"trace_seed{s}_PointNav_ppo_trained" for s in (1, 2, 3, 4)))},
        let=SEEDS_LET, rows=SEEDS_ROWS, columns=SEEDS_COLUMNS, note=SEEDS_NOTE),
    "trace_attacker_seeds_84": Table(
        "docs/trace.md", {"runs": headline("trace_PointNav_ppo_84_trained",
                                           *(f"trace_seed{s}_PointNav_ppo_84_trained" for s in (1, 2)))},
        let=SEEDS_LET, rows=SEEDS_ROWS, columns=SEEDS_COLUMNS, note=SEEDS_NOTE),
    # the paper preset's learning curve (benchmarks/trace_paper_curve.py): the first epoch, every fifth and the
    # last, with this process's CPU seconds for the epoch (training and its validation)
    "trace_paper_curve": Table(
        "docs/trace.md", {"data": "docs/data/trace_paper_curve.json"},
        rows=Loop("h", "data.curve.history|thin('epoch', 5)"),
        columns=(Col("epoch", "{h.epoch}"), Col("scheduled-sampling probability", "{h.p_scheduled_sampling:.2f}"),
                 Col("train loss", "{h.loss:.4f}"), Col("train MSE", "{h.mse:.4f}"),
                 Col("train action CE", "{h.ce:.3f}"),
                 Col("val RGB PSNR, autoregressive (dB)", "{h.val_psnr_autoregressive:.2f}"),
                 Col("val action accuracy", "{h.val_action_accuracy:.2f}"),
                 Col("CPU s (epoch)", "{data.cpu_seconds_per_epoch[h.epoch]?:.0f}"))),
    "trace_vs_paper": TRACE_VS_PAPER,
    "resolution_inversion": Table("docs/inversion-attacks.md", {"runs": RESOLUTION_IG_RUNS}, let={"only": (
        "action_accuracy", "rgb_psnr", "rgb_psnr_y", "rgb_ssim_y", "rgb_ssim@gauss11")},
        rows=RESOLUTION_ROWS, columns=RESOLUTION_COLUMNS),
    "continuous_pipeline": CONTINUOUS,
    "evaluate_speed_epyc": Table("docs/evaluate.md", {"data": "benchmarks/results/bench_evaluate_epyc.json"},
                                 **EVALUATE_SPEED),
    "evaluate_speed_fast": Table("docs/evaluate.md", {"data": "benchmarks/results/bench_evaluate.json"},
                                 **EVALUATE_SPEED),
    "import_costs": IMPORT_COSTS,
    # per committed entry and board: public (development) score, fresh-layout score, gap, the strongest
    # reference on the fresh layouts and the leakage over it, verify seconds
    "victim_recipes": Table(
        "docs/tasks.md", {"data": "benchmarks/results/victim_recipes.json"},
        rows=Loop("r", "data", let={"v": "r.validation?.policies?"}),
        columns=(Col("victim", "`{r.victim}`"),
                 Col("training change (the rest is the zoo's recipe)", Join("c", "r.changes", "`{c}`", empty="none: the zoo's recipe")),
                 Col("steps", "{r.report.timesteps:,}"),
                 Col("hours: wall / CPU", "{r.report.train_seconds|per(3600):.2f} / "
                                          "{r.report.train_cpu_seconds?|per(3600):.2f}"),
                 Col("learning curve: success on its 32 val episodes", (
                     Join("p", "r.curve|thin('timesteps', 98304)",
                          "{p.timesteps|per(1000):.0f}k {p.success_rate|times(100):.0f}%"),
                     " (random {r.curve_random.success_rate|times(100):.0f}%)")),
                 Col("committed validation (120 val episodes): success, return", When(
                     "v", ("{v.trained.success_rate|times(100):.1f}% [{v.trained.success_ci95|min|times(100):.1f}, "
                           "{v.trained.success_ci95|max|times(100):.1f}], {v.trained.mean_return:.2f} vs random "
                           "{v.random.success_rate|times(100):.1f}%, {v.random.mean_return:.2f}: learned ",
                           "{r.validation.learned|yesno}"), "not run"))),
        note="`python benchmarks/victim_recipes.py TASK/VICTIM --set KEY=VALUE ...` (one row per trial, "
             "`benchmarks/results/victim_recipes.json`); torch on 1 thread, the environments in the learner's "
             "process or one worker (`workers` in the JSON), on the shared 2-core machine beside one or two other jobs (1-min load 2-3), so wall "
             "hours are pessimistic; CPU hours count the learner and its workers."),
    "fresh_gap": Table(
        "docs/leaderboard.md", {"data": "benchmarks/results/fresh_gap.json"},
        rows=Loop("r", "data.rows", let={"spec": "r.metric|contains('psnr')|choose('.1f', '.3f')",
                                         "signed": "r.metric|contains('psnr')|choose('+.1f', '+.3f')"}),
        columns=(Col("entry", "`{r.entry|removesuffix('.json')}`"), Col("board metric", "`{r.metric}`"),
                 Col("public split (development) [95% CI]", "{r.public|interval(spec)}"),
                 Col("fresh layouts [95% CI] (layouts)",
                     ("{r.fresh?|interval(spec)}", When("r.layouts?", " ({r.layouts})", ""))),
                 Col("fresh - public", When("r.gap?|given", "{r.gap|fmt(signed)}", "{r.status}")),
                 Col("strongest reference (fresh)",
                     "{r.reference?|or('--')|prior|replace('swap_control', 'swap control')}"),
                 Col("leakage over it (fresh)", "{r.leakage?|interval(spec)}"),
                 Col("verify s", "{r.verify_seconds?:.0f}")),
        note="{data.protocol}; {data.machine.cpus} cores; {data.conditions}."),
}
