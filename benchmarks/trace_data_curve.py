"""TRACE's paper preset against the number of auxiliary sequences: a data-size curve at fixed compute.

The paper trains TRACE on 108 scenes x 1000 steps; this CPU trains the paper-scale model (108-112M
parameters) at ~1 CPU second per sequence presentation. This script trains it on N auxiliary eight-step
sequences of PointNav/ppo (trained) for several N, with the paper's learned full-gradient encoder and with
the analytic one (fixed sketches + closed-form layer inputs), and scores every epoch on the same 12
val-layout sequences (autoregressive RGB PSNR, action accuracy) beside the best gradient-free prior on the
same frames.

**Fixed compute, not fixed epochs.** Every point sees the same number of sequence presentations
(``--presentations``; epochs = presentations / N) in the same number of optimiser steps of the same batch,
with the same learning-rate schedule per step (``warmup_steps``): a point differs from another only in how
many *distinct* sequences those presentations are drawn from. With fixed epochs the larger sets would also
get proportionally more optimisation, and the curve would mix data with compute. What still differs: the
scheduled-sampling probability is set per epoch, so a one-epoch point trains teacher-forced throughout (the
rollout term, on the model's own frames, is on in every point).

**The data.** N sequences are the first N of the train plan with ``ceil(N / 96)`` episodes per layout: up to
96 one per train layout, beyond that every layout equally often. The sets are nested (each contains the
smaller ones). The simulated episodes are kept in this process and shared by both encoders and all sizes;
each attacker still computes and caches its own features (``<cache>/attackers/trace-features-<hash>``).

**Resumable, time-boxed.** One epoch per call (``stop_after=1``: the attacker checkpoints every epoch, keyed
by its config hash), so re-running the command continues where it stopped. It stops at ``--deadline``
(HH:MM UTC today) or after ``--minutes``, whichever is first, or when ``--cpu-budget`` CPU seconds of this
script are spent; it does not start an epoch it expects to end past the deadline, and a hard stop at the
deadline abandons the epoch in progress (the previous checkpoint stands). After every epoch it writes
docs/data/trace_data_curve.json: per point the sequences, encoder, epochs done, CPU and wall seconds per
call, load average, the learning curve; the prior's PSNR on the same frames; a log-linear fit per encoder and
its extrapolation to the paper's data size (an extrapolation, stated as such).

Run:  OMP_NUM_THREADS=1 python benchmarks/trace_data_curve.py --deadline 12:35
      python benchmarks/trace_data_curve.py --render    # docs/img/trace_data_curve.png from the JSON
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "data" / "trace_data_curve.json"
PLOT = ROOT / "docs" / "img" / "trace_data_curve.png"
PAPER = ROOT / "docs" / "data" / "trace_paper.json"

TASK, VICTIM, CHECKPOINT = "PointNav", "ppo", "trained"
TRAIN_LAYOUTS = 96      # PointNav's train layouts (docs/tasks.md)
VAL_SEQUENCES = 12      # one per val layout: the most the attacker's val collection draws
SEQUENCE_STEPS = 8
# The paper: 108 scenes x 1000 steps in eight-step sequences; the paper preset on our layouts: 96 x 125.
PAPER_PSNR_DB = 18.8
PAPER_SEQUENCES = 108 * 1000 // SEQUENCE_STEPS
PRESET_SEQUENCES = TRAIN_LAYOUTS * 125
# Ordered so that a run cut short still has both ends of the curve for both encoders.
DEFAULT_SIZES = (24, 384, 96)
DEFAULT_ENCODERS = ("learned", "analytic")
DEFAULT_PRESENTATIONS = 384
DEFAULT_BATCH = 24
DEFAULT_WARMUP = 2
CPU_BUDGET_S = 7200.0   # two CPU-hours of one core
STOPPED = "stopped after epoch"  # the attacker's message when stop_after ends a call


class DeadlineReached(Exception):
    """The hard stop: raised by the alarm at the deadline, wherever the training is."""


@dataclass(frozen=True)
class Point:
    """One trained attacker of the curve: ``sequences`` distinct auxiliary sequences, ``encoder``."""

    sequences: int
    encoder: str
    presentations: int
    batch_size: int
    warmup_steps: int

    @property
    def key(self) -> str:
        return f"{self.encoder}-{self.sequences}"

    @property
    def epochs(self) -> int:
        return self.presentations // self.sequences

    def overrides(self) -> dict[str, Any]:
        """The paper preset's fields this point sets (the rest of the preset is unchanged)."""
        return {"encoder": self.encoder, "max_episodes": self.sequences,
                "episodes_per_layout": math.ceil(self.sequences / TRAIN_LAYOUTS), "val_episodes": VAL_SEQUENCES,
                "epochs": self.epochs, "batch_size": self.batch_size, "warmup_steps": self.warmup_steps}


def plan(sizes: Sequence[int], encoders: Sequence[str], presentations: int, batch_size: int,
         warmup_steps: int) -> list[Point]:
    """The points in run order (size-major: both encoders of a size before the next size).

    Raises:
        ValueError: a size that does not divide the presentations into whole epochs of whole batches, so
            that every point takes the same optimiser steps.

    Example:
        >>> [p.key for p in plan((24, 96), ("learned", "analytic"), 96, 24, 1)]
        ['learned-24', 'analytic-24', 'learned-96', 'analytic-96']
    """
    for n in sizes:
        if presentations % n or n % batch_size:
            raise ValueError(f"{n} sequences: presentations ({presentations}) must be a whole number of epochs "
                             f"and {n} a whole number of batches of {batch_size}")
    return [Point(n, e, presentations, batch_size, warmup_steps) for n in sizes for e in encoders]


def settings(points: Sequence[Point]) -> dict[str, Any]:
    """What makes two runs the same run (a record of other settings is not resumed). The victim's weights are
    part of it: a victim retrained since (issue 37) starts a new record, not the old weights' epochs."""
    from gradleak_bench.victims.card import weights_sha256

    return {"task": TASK, "victim": VICTIM, "checkpoint": CHECKPOINT,
            "weights_sha256": weights_sha256(TASK, VICTIM, CHECKPOINT), "preset": "paper",
            "points": [p.key for p in points], "overrides": {p.key: p.overrides() for p in points}}


# -- the record ------------------------------------------------------------------------------------------


def new_record(points: Sequence[Point], command: str) -> dict[str, Any]:
    return {"what": "TRACE paper preset on PointNav/ppo (trained): val quality against auxiliary sequence "
                    "count at fixed compute per point",
            "command": command, "settings": settings(points), "cpu_budget_seconds": CPU_BUDGET_S,
            "paper": {"psnr_db": PAPER_PSNR_DB, "sequences": PAPER_SEQUENCES, "preset_sequences": PRESET_SEQUENCES,
                      "source": "docs/data/trace_paper.json: 108 scenes x 1000 steps, eight-step sequences; the "
                                "paper preset's 96 layouts x 125 sequences on our layouts"},
            "prior": None,
            "points": {p.key: {"sequences": p.sequences, "encoder": p.encoder, "epochs_planned": p.epochs,
                               "epochs_done": 0, "presentations": p.presentations, "batch_size": p.batch_size,
                               "warmup_steps": p.warmup_steps, "cache_key": None, "calls": [], "history": []}
                       for p in points},
            "stops": []}


def load_record(path: Path, points: Sequence[Point], command: str) -> dict[str, Any]:
    """The record of this run so far, or a new one (none yet, or one of other settings: another run).

    Example:
        >>> import tempfile
        >>> p = plan((24,), ("learned",), 48, 24, 1)
        >>> load_record(Path(tempfile.mkdtemp()) / "x.json", p, "cmd")["points"]["learned-24"]["epochs_planned"]
        2
    """
    if path.is_file():
        record = json.loads(path.read_text())
        if record.get("settings") == settings(points):
            record["command"] = command
            return record
        print(f"{path.name}: another configuration is recorded there; starting a new record", file=sys.stderr)
    return new_record(points, command)


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    """Atomically (a killed run never leaves half a file), with the fit and totals refreshed."""
    out = dict(record)
    out["cpu_seconds_used"] = round(cpu_used(record), 1)
    out["extrapolation"] = extrapolation(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    os.replace(tmp, path)


def record_call(record: dict[str, Any], key: str, curve: Mapping[str, Any], cpu_s: float, wall_s: float,
                load: tuple[float, float], collected: bool) -> None:
    """Book one call (one epoch, and the collection when ``collected``) of point ``key``. A call that ended
    on an epoch the record already has (a rerun that only loaded the finished attacker) adds its cost but
    not a second epoch."""
    point = record["points"][key]
    epoch = int(curve["epochs_done"])
    point["calls"].append({"epoch": epoch, "cpu_seconds": round(cpu_s, 1), "wall_seconds": round(wall_s, 1),
                           "load_average": [round(load[0], 2), round(load[1], 2)],
                           "includes_collection": collected,
                           "new_epoch": epoch > point["epochs_done"]})
    point["epochs_done"] = epoch
    point["history"] = [{k: h[k] for k in ("epoch", "p_scheduled_sampling", "loss", "mse", "ce", "rollout",
                                           "seconds", "val_psnr_autoregressive", "val_action_accuracy") if k in h}
                        for h in curve["history"]]


def cpu_used(record: Mapping[str, Any]) -> float:
    """This run's CPU seconds so far, over every call of every point (and the prior's frames)."""
    calls = sum(c["cpu_seconds"] for p in record["points"].values() for c in p["calls"])
    return calls + sum(s.get("cpu_seconds", 0.0) for s in record.get("setup", []))


def done(point: Mapping[str, Any]) -> bool:
    return point["epochs_done"] >= point["epochs_planned"]


# -- the fit and its extrapolation --------------------------------------------------------------------------


def fit_loglinear(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b log10(x)``: (a, b). At least two distinct x.

    Example:
        >>> fit_loglinear([10, 100, 1000], [1.0, 2.0, 3.0])
        (0.0, 1.0)
    """
    if len(set(xs)) < 2:
        raise ValueError("a log-linear fit needs at least two distinct sequence counts")
    lx = [math.log10(x) for x in xs]
    mx, my = sum(lx) / len(lx), sum(ys) / len(ys)
    b = sum((u - mx) * (v - my) for u, v in zip(lx, ys)) / sum((u - mx) ** 2 for u in lx)
    return round(my - b * mx, 12), round(b, 12)


def final_points(record: Mapping[str, Any], encoder: str) -> list[tuple[int, float, float]]:
    """(sequences, last val PSNR, last val action accuracy) of this encoder's finished points."""
    return sorted((p["sequences"], p["history"][-1]["val_psnr_autoregressive"],
                   p["history"][-1]["val_action_accuracy"])
                  for p in record["points"].values() if p["encoder"] == encoder and done(p) and p["history"])


def extrapolation(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per encoder with two or more finished points: the log-linear fit of the final val PSNR against the
    sequence count and its value at the paper's data sizes. An extrapolation over 1.5 decades or more past
    the largest point, at this run's compute per point: not a measurement."""
    out: dict[str, Any] = {"note": "an extrapolation, not a measurement: val PSNR = a + b log10(sequences) "
                                   "fitted on the finished points (same compute each), evaluated at the paper's "
                                   "data sizes; the compute per point stays this run's, far below the paper's"}
    for encoder in sorted({p["encoder"] for p in record["points"].values()}):
        pts = final_points(record, encoder)
        if len({n for n, _, _ in pts}) < 2:
            continue
        a, b = fit_loglinear([n for n, _, _ in pts], [v for _, v, _ in pts])
        out[encoder] = {"points": [n for n, _, _ in pts], "intercept_db": round(a, 3),
                        "db_per_decade": round(b, 3),
                        "at_paper_sequences_db": round(a + b * math.log10(PAPER_SEQUENCES), 2),
                        "at_preset_sequences_db": round(a + b * math.log10(PRESET_SEQUENCES), 2)}
    return out


# -- deadline ---------------------------------------------------------------------------------------------


def deadline_from(text: str | None, minutes: float | None, now: dt.datetime) -> dt.datetime:
    """The earlier of ``HH:MM`` UTC (today; tomorrow when already past) and ``minutes`` from ``now``.

    Example:
        >>> now = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.timezone.utc)
        >>> deadline_from("12:35", 30, now).strftime("%H:%M"), deadline_from("12:35", None, now).strftime("%H:%M")
        ('10:30', '12:35')
    """
    ends = []
    if text:
        hh, mm = (int(x) for x in text.split(":"))
        at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        ends.append(at if at > now else at + dt.timedelta(days=1))
    if minutes is not None:
        ends.append(now + dt.timedelta(minutes=minutes))
    if not ends:
        raise ValueError("give --deadline HH:MM or --minutes N")
    return min(ends)


def epoch_estimate(record: Mapping[str, Any], point: Mapping[str, Any]) -> float:
    """Expected wall seconds of this point's next call: its sequences at the slowest wall rate per
    sequence presentation of the epochs so far (1.5 s before any), plus the validation."""
    rates = [h["seconds"] / p["sequences"] for p in record["points"].values() for h in p["history"]]
    per = max(rates[-3:]) if rates else 1.5
    return point["sequences"] * per + VAL_SEQUENCES * SEQUENCE_STEPS * 0.1


# -- the training -------------------------------------------------------------------------------------------


class SharedEpisodes:
    """The attacker's auxiliary data (:class:`gradleak_bench.run.auxiliary.AuxiliaryData`, undefended), with every
    simulated episode kept in this process: the nested data sets and both encoders simulate each once.
    Yields what ``AuxiliaryData.collect`` yields: the plan's first ``max_episodes`` episodes and their exact
    gradients."""

    defense = None

    def __init__(self, victim: Any, gradients: Any):
        self.victim, self.gradients = victim, gradients
        self.episodes: dict[tuple[Any, ...], Any] = {}

    def collect(self, episodes_per_layout: int = 1, seed: int = 1, split: str = "train",
                max_episodes: int | None = None, sequence_length: int | None = None,
                protocol: str | None = None, defended: bool = False) -> Iterator[tuple[Any, Any]]:
        from gradleak_bench import dataset as datasets
        from gradleak_bench import dataset_config
        from gradleak_bench.run.episodes import generate_episodes

        if defended or split not in ("train", "val"):
            raise ValueError("SharedEpisodes serves exact train/val episodes only")
        config = dataset_config.DatasetConfig(
            task=TASK, victim=self.victim.spec.name, checkpoint=self.victim.checkpoint, split=split,
            episodes_per_layout=episodes_per_layout, seed=seed, sequence_length=sequence_length or SEQUENCE_STEPS,
            protocol=dataset_config.check_protocol(protocol or dataset_config.FIRST8))
        entries = datasets.plan(config)[:max_episodes]
        key = (split, config.sequence_length, config.protocol)
        missing = [e for e in entries if key + e[1:] not in self.episodes]
        for entry, episode in zip(missing, generate_episodes(self.victim, split, missing, config.sequence_length,
                                                            config.protocol)):
            self.episodes[key + entry[1:]] = episode
        for entry in entries:
            episode = self.episodes[key + entry[1:]]
            yield episode, self.gradients(episode)


def prior_scores(val_images: Any) -> dict[str, Any]:
    """Every RGB prior of the victim (fitted on train layouts, docs/priors.md) on the val frames, with the
    attacker's own PSNR (per frame on [0, 1], averaged over frames); the best of them."""
    import torch

    from gradleak_bench import priors
    from gradleak_bench.baselines.attacks.trace.data import psnr, to_unit

    fitted = priors.load_or_fit(priors.config_for(TASK, VICTIM, CHECKPOINT, SEQUENCE_STEPS))
    frames = torch.cat([to_unit(val_images.images[i, :int(k)]) for i, k in enumerate(val_images.lengths)])
    scores = {}
    for prior in fitted.priors:
        if prior.field != "rgb":
            continue
        # the prior's frame as the scorer receives it (float, 0-255), on the attacker's [0, 1] scale
        guess = torch.as_tensor(prior.apply(1)[0], dtype=torch.float32).movedim(-1, -3) / 255.0
        scores[prior.name] = round(float(psnr(guess.expand_as(frames), frames).mean()), 3)
    best = max(scores, key=scores.get)
    # the action priors that return the same guess for every episode (the seeded histogram draw is left out)
    actions = torch.cat([val_images.actions[i, :int(k)] for i, k in enumerate(val_images.lengths)])
    steps = torch.cat([torch.arange(int(k)) for k in val_images.lengths])
    hits = {prior.name: round(float((torch.as_tensor(prior.apply(SEQUENCE_STEPS))[steps] == actions).float().mean()), 4)
            for prior in fitted.priors if prior.field == "action" and prior.kind == "template"}
    best_action = max(hits, key=hits.get)
    return {"val_frames": int(frames.shape[0]), "psnr_db": scores, "best": best, "best_psnr_db": scores[best],
            "action_accuracy": hits, "best_action": best_action, "best_action_accuracy": hits[best_action],
            "fitted_on": fitted.config.key}


def run(args: argparse.Namespace, out: Path) -> None:
    import torch

    from gradleak_bench.baselines.attacks import trace as tr
    from gradleak_bench.baselines.attacks.trace import data as trace_data
    from gradleak_bench.baselines.attacks.trace.config import defense_identity
    from gradleak_bench.baselines.attacks.trace.training import CURVE
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.victims.checkpoint import victim_info
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.spaces import env_spaces

    points = plan(args.sizes, args.encoders, args.presentations, args.batch, args.warmup)
    command = " ".join(["OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "?"), "python",
                        "benchmarks/trace_data_curve.py", *sys.argv[1:]])
    record = load_record(out, points, command)
    now = dt.datetime.now(dt.timezone.utc)
    deadline = deadline_from(args.deadline, args.minutes, now)
    record["threads"] = torch.get_num_threads()
    print(f"[data-curve] {len(points)} points, {args.presentations} presentations each; stop by "
          f"{deadline:%H:%M} UTC or {args.cpu_budget:.0f} CPU s; {cpu_used(record):.0f} CPU s already spent",
          flush=True)

    def hard_stop(signum: int, frame: Any) -> None:
        raise DeadlineReached

    signal.signal(signal.SIGALRM, hard_stop)
    signal.alarm(max(1, int((deadline - now).total_seconds())))
    cpu0 = time.process_time()
    victim = load_victim(TASK, VICTIM, CHECKPOINT)
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces(TASK, victim.spec.image_size)[0])
    info, aux = victim_info(victim, gradients), SharedEpisodes(victim, gradients)
    identity, layout = tr.victim_identity(info), tr.gradient_layout(info)
    record.setdefault("setup", []).append({"what": "victim load", "cpu_seconds": round(time.process_time() - cpu0, 1)})
    stop = "every point done"
    try:
        for point in points:
            entry = record["points"][point.key]
            while not done(entry):
                if cpu_used(record) >= args.cpu_budget:
                    raise DeadlineReached(f"CPU budget of {args.cpu_budget:.0f} s spent")
                left = (deadline - dt.datetime.now(dt.timezone.utc)).total_seconds()
                if epoch_estimate(record, entry) > left:
                    raise DeadlineReached(f"the next epoch of {point.key} (~{epoch_estimate(record, entry):.0f} s) "
                                          f"would end past the deadline ({left:.0f} s left)")
                attack = tr.TRACE(preset="paper", progress=False, stop_after=1, **point.overrides())
                features = trace_data.feature_cache(attack.config, identity, layout)
                collected = not features.exists("train")
                load0, wall0, cpu0 = os.getloadavg()[0], time.time(), time.process_time()
                try:
                    attack.fit(info, aux)
                except GradleakError as exc:
                    if STOPPED not in str(exc):
                        raise
                cache = attack.cache(identity, layout, defense_identity(attack.config, aux))
                curve = cache.load_json(CURVE)
                entry["cache_key"] = cache.key
                record_call(record, point.key, curve, time.process_time() - cpu0, time.time() - wall0,
                            (load0, os.getloadavg()[0]), collected)
                if record["prior"] is None:
                    record["prior"] = prior_scores(trace_data.TraceData(**features.load_tensors("val")[0]))
                h = curve["history"][-1]
                print(f"[data-curve] {point.key} epoch {curve['epochs_done']}/{point.epochs}: val PSNR "
                      f"{h['val_psnr_autoregressive']:.2f} dB, actions {h['val_action_accuracy']:.2f}, "
                      f"{entry['calls'][-1]['cpu_seconds']:.0f} CPU s, load {os.getloadavg()[0]:.1f}",
                      flush=True)
                write_record(out, record)
    except DeadlineReached as exc:
        stop = str(exc) or f"deadline {deadline:%H:%M} UTC reached (the epoch in progress is abandoned)"
    finally:
        signal.alarm(0)
        record["stops"].append({"at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "why": stop, "cpu_seconds_used": round(cpu_used(record), 1),
                                "process_cpu_seconds": round(time.process_time(), 1)})
        write_record(out, record)
    print(f"[data-curve] stopped: {stop}; {cpu_used(record):.0f} CPU s in all; wrote {out}", flush=True)


# -- the picture --------------------------------------------------------------------------------------------


def render(path: Path, plot: Path) -> None:
    """Val PSNR of the last epoch against the sequence count (log x), one line per encoder (hollow: a point
    not finished), the best prior, the paper's 18.8 dB at its data size, and the dashed extrapolation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    record = json.loads(path.read_text())
    paper, prior = record["paper"], record["prior"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {"learned": "tab:blue", "analytic": "tab:orange"}
    for encoder, colour in colours.items():
        rows = sorted((p["sequences"], p["history"][-1], done(p)) for p in record["points"].values()
                      if p["encoder"] == encoder and p["history"])
        if not rows:
            continue
        label = f"{encoder} encoder" + (" (the paper's)" if encoder == "learned" else "")
        for axis, key in ((ax, "val_psnr_autoregressive"), (ax2, "val_action_accuracy")):
            axis.plot([n for n, _, _ in rows], [h[key] for _, h, _ in rows], color=colour, marker="o", label=label)
            for n, h, finished in rows:
                if not finished:
                    axis.plot([n], [h[key]], "o", color="white", markeredgecolor=colour)
        fit = record.get("extrapolation", {}).get(encoder)
        if fit:
            xs = [max(fit["points"]), paper["sequences"]]
            ax.plot(xs, [fit["intercept_db"] + fit["db_per_decade"] * math.log10(x) for x in xs], "--",
                    color=colour, label=f"extrapolation ({fit['db_per_decade']:+.2f} dB/decade)")
    if prior and "best_action" in prior:
        ax2.axhline(prior["best_action_accuracy"], color="grey", lw=1,
                    label=f"best prior ({prior['best_action']}) {prior['best_action_accuracy']:.2f}")
    ax2.legend(fontsize=7)
    if prior:
        ax.axhline(prior["best_psnr_db"], color="grey", lw=1,
                   label=f"best prior ({prior['best']}) {prior['best_psnr_db']:.1f} dB")
    ax.plot([paper["sequences"]], [paper["psnr_db"]], "k*", ms=12,
            label=f"paper {paper['psnr_db']} dB ({paper['sequences']:,} sequences)")
    ax.axvline(paper["preset_sequences"], color="k", lw=0.5, ls=":")
    sizes = sorted({p["sequences"] for p in record["points"].values()})
    for axis, ticks in ((ax, [*sizes, paper["sequences"]]), (ax2, sizes)):
        axis.set_xscale("log")
        axis.set_xticks(ticks, [f"{t:,}" for t in ticks])
        axis.minorticks_off()
        axis.set_xlabel("auxiliary sequences (8 steps each)")
    ax.set_ylabel("val RGB PSNR, autoregressive (dB)")
    ax.legend(fontsize=7)
    ax2.set_ylabel("val action accuracy")
    points = record["points"].values()
    per = next(iter(points))
    fig.suptitle(f"TRACE paper preset, PointNav/ppo (trained), {per['presentations']} sequence presentations "
                 f"per point ({per['presentations'] // per['batch_size']} steps of {per['batch_size']}); "
                 f"val: {prior['val_frames'] if prior else '?'} frames; dotted: 96 x 125", fontsize=9)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=110)
    print("wrote", plot)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                        help="auxiliary sequence counts, in run order")
    parser.add_argument("--encoders", nargs="+", default=list(DEFAULT_ENCODERS), choices=DEFAULT_ENCODERS)
    parser.add_argument("--presentations", type=int, default=DEFAULT_PRESENTATIONS,
                        help="sequence presentations per point (the fixed compute)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="warm-up, optimiser steps")
    parser.add_argument("--deadline", help="HH:MM UTC: stop by then")
    parser.add_argument("--minutes", type=float, help="stop after this many minutes")
    parser.add_argument("--cpu-budget", type=float, default=CPU_BUDGET_S)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--plot", type=Path, default=PLOT)
    parser.add_argument("--render", action="store_true", help="only draw the picture from --out")
    args = parser.parse_args(argv)
    if args.render:
        render(args.out, args.plot)
        return
    run(args, args.out)


if __name__ == "__main__":
    main()
