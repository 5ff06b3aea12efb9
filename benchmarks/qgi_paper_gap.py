"""The QGI/RGI paper gap at the paper's resolution and budget, separated by cause (issue 31, part 4).

The paper (docs/inversion-attacks.md, "References") attacks freshly initialised networks on 150x150 AI2-THOR
frames with 10^4 + 10^4 iterations; our headline numbers are 64x64 PyBullet frames at the ``quick`` preset
(300 + 200). Each *arm* below changes one of those: the resolution (the ``*_150`` victims at ``init``,
gradleak_bench/victims/zoo.py), the budget (``paper`` vs ``quick``), and how stage 1 recovers the first linear
layer's input (the paper's Adam, or ``linear_solver=closed_form``, which solves it exactly). The scene
(AI2-THOR vs PyBullet) cannot be changed here.

Frames: frame k is step ``k % 8`` of the k-th episode of the test split (one episode per layout in turn;
benchmarks/budget_curves.py's rule, so the first frames are the same layouts and steps as its 64x64 paper-budget
frames). Each frame is its own optimisation problem in QGI and RGI, so a frame is the unit: a whole
``evaluate`` episode (8 frames) at the paper budget costs 8 x 5-6 CPU-minutes at 150x150, over this study's
budget for one run. The scoring is the runner's: the Table I protocol's metrics (headline_leakage.QGI_METRICS)
by ``gradleak_bench.run.scorer.score``, each frame beside every gradient-free prior at the same step and the
swap control (the next frame's reconstruction, from another layout, scored against this frame: the runner's
partner rule), summarised by ``summarise_metrics`` as ``evaluate`` does. The ``init`` datasets of the ``*_150``
victims are unofficial draws (no official split); the ``*_trained`` arms (QGI on the trained ``dqn_150``, issue
40) take their frames from its official ``trained`` test split (each file says which in ``official_split``).
Either way these are development numbers: the attacks run in this process, unsealed, on the public frames.

Stage 1 and the depth: in SB3's MultiInputPolicy the depth image enters the first linear layer verbatim, and in
the two-stage pipeline it is a stage-1 variable, fixed afterwards. The attack does not expose stage 1's
residual, so "stage 1 solved the first layer" is read off the depth it returns: depth PSNR >= 60 dB (RMS error
<= 1 cm on the 10 m range; the budget-curve table's rule), beside the relative L2 error of the depth. On the
paper's own network (the ``*_convdepth`` arms, ``reinforce_convdepth_150``) depth passes a CNN and is recovered in
stage 2, so there "solved" is not read (null) and the file's configuration says ``stage1_reads_depth: false``.

Resumable: each arm's file ``docs/data/qgi150/ARM.json`` gets each unit of frames as it finishes, with its
wall and CPU time and the load; a rerun skips frames already there (same configuration). The reconstructions
are kept in ``runs/qgi_paper_gap/ARM/`` (not committed): a later frame's swap control needs the earlier
frames' reconstructions, and a frame's own reconstruction is scored against every other frame's truth
(``cross``), so the committed file holds every control its summary uses. The frames of one unit are one
batched optimisation whose initial images are one seeded draw, so a frame's result depends on its unit (on the
12 frames of ``qgi_quick_cf_64``, units of 3-4-4-1 instead of 4-4-4 moved single frames by up to 1 dB RGB
PSNR-Y): ``--unit`` is part of the configuration, and a rerun with the same one reproduces the file bit for bit.

Run: OMP_NUM_THREADS=1 nice -n 10 python benchmarks/qgi_paper_gap.py ARM [ARM ...] [--frames N] [--unit U]
     python benchmarks/qgi_paper_gap.py --list
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "qgi150"
RUNS = ROOT / "runs" / "qgi_paper_gap"
TASK, SPLIT = "ActivePerception", "test"
SOLVED_DB = 60.0  # depth PSNR at or above which stage 1 recovered the first linear layer's input
SNAPSHOTS = (200, 1000, 3000)  # stage-2 checkpoints of a paper run (its end, 10^4, is the run itself)
SNAPSHOT_METRICS = ("rgb_psnr_y", "rgb_ssim_y")
# also RGB PSNR on [0, 1]-scaled RGB, not Y: what the 64x64 paper-budget curves (docs/data/budget_curves/) report
EXTRA_METRICS = ("rgb_psnr",)


@dataclass(frozen=True)
class Arm:
    attack: str
    victim: str
    preset: str
    linear_solver: str
    overrides: tuple[tuple[str, object], ...] = ()  # the tests' tiny budgets
    checkpoint: str = "init"  # the paper's (a freshly initialised network); "trained" for issue 40's trained rows

    def params(self) -> dict[str, object]:
        params: dict[str, object] = {"preset": self.preset, "linear_solver": self.linear_solver}
        if self.preset == "paper":
            params["snapshots"] = ",".join(map(str, SNAPSHOTS))
        return {**params, **dict(self.overrides)}

    @property
    def snapshots(self) -> tuple[int, ...]:
        text = str(self.params().get("snapshots", ""))
        return tuple(int(n) for n in text.split(",") if n)


ARMS = {
    f"{attack}_{preset}_{solver}_{size}": Arm(attack, f"{victim}_150" if size == 150 else victim, preset,
                                              "adam" if solver == "adam" else "closed_form")
    for attack, victim in (("qgi", "dqn"), ("rgi", "reinforce"))
    for preset in ("paper", "quick") for solver in ("adam", "cf") for size in (150, 64)
    if not (preset == "paper" and size == 64)  # 64x64 at the paper budget: docs/data/budget_curves/
}
# QGI on the trained 150x150 DQN (issue 40): the closed-form arms, the one stage 1 that solves at 150x150 at init.
# Its frames come from dqn_150's official `trained` test split. RGI's trained arms are on the paper's network below.
ARMS.update({f"qgi_{preset}_cf_150_trained": Arm("qgi", "dqn_150", preset, "closed_form", checkpoint="trained")
             for preset in ("paper", "quick")})
# RGI on the paper's network at the paper's resolution (reinforce_convdepth_150: RGB and depth through NatureCNNs,
# the box through its own linear layer; issues 37 and 40), at init and trained: the "architecture" cause. Stage 1
# recovers the box and the image features there, so depth is a stage-2 variable, as in the paper.
ARMS.update({f"rgi_{preset}_{solver}_150_convdepth{suffix}": Arm(
    "rgi", "reinforce_convdepth_150", preset, "adam" if solver == "adam" else "closed_form", checkpoint=checkpoint)
    for preset in ("paper", "quick") for solver in ("adam", "cf")
    for suffix, checkpoint in (("", "init"), ("_trained", "trained"))})
# The same network at 64x64 (reinforce_convdepth, the first REINFORCE that learned, issue 37): the resolution cause
# on the paper's network, at init and trained.
ARMS.update({f"rgi_{preset}_{solver}_64_convdepth{suffix}": Arm(
    "rgi", "reinforce_convdepth", preset, "adam" if solver == "adam" else "closed_form", checkpoint=checkpoint)
    for preset in ("paper", "quick") for solver in ("adam", "cf")
    for suffix, checkpoint in (("", "init"), ("_trained", "trained"))})


def machine() -> dict:
    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


class Frames:
    """The held-out frames of one victim: truth, released (undefended) gradients, priors."""

    def __init__(self, victim: str, checkpoint: str = "init"):
        from gradleak_bench import dataset as datasets
        from gradleak_bench.inversion.network import VictimNet
        from gradleak_bench.priors import references_for
        from gradleak_bench.run.evaluation import select_episodes
        from gradleak_bench.victims.checkpoint import victim_info
        from gradleak_bench.stream.replay import EpisodeGradients
        from gradleak_bench.victims.checkpoint import load_victim
        from gradleak_bench.victims.spaces import env_spaces

        loaded = load_victim(TASK, victim, checkpoint)
        self.gradients = EpisodeGradients(loaded.policy, loaded.spec.loss, env_spaces(TASK, loaded.spec.image_size)[0])
        self.info = victim_info(loaded, self.gradients)
        # SB3's MultiInputPolicy flattens depth into the first linear layer (a stage-1 variable); the paper's
        # network passes it through a CNN, and then the returned depth says nothing about stage 1
        self.stage1_reads_depth = "depth" in VictimNet(self.info).linear_keys()
        self.dataset = datasets.load_or_generate(datasets.standard_config(TASK, victim, checkpoint, SPLIT),
                                                 progress=False)
        self.ids = select_episodes(self.dataset, None)
        self.priors = references_for(self.dataset, ("rgb", "depth", "bbox", "action", "q_value", "q_target",
                                                    "return"))
        self._episodes: dict[str, object] = {}

    def frame(self, k: int):
        episode_id = self.ids[k]
        if episode_id not in self._episodes:
            self._episodes[episode_id] = self.dataset.episode(episode_id)
        episode = self._episodes[episode_id]
        return episode, k % episode.length

    def name(self, k: int) -> str:
        return f"{self.ids[k]}@{self.frame(k)[1]}"

    def truth(self, k: int):
        """Frame k as a one-step truth episode (budget_curves.one_step)."""
        from gradleak_bench.records import Episode

        episode, t = self.frame(k)
        return Episode(episode.episode_id, episode.task, episode.layout_id, episode.seed,
                       {key: np.asarray(v)[t:t + 1] for key, v in episode.steps.items()}, episode.backend)


def score_fields(metrics: list, fields: dict, truth) -> dict[str, float]:
    from gradleak_bench.metrics.scoring import score

    return score(metrics, fields, truth)[0]


def depth_rel_error(fields: dict, truth) -> float | None:
    """||depth_rec - depth|| / ||depth||: stage 1's error on the one modality it alone determines."""
    if "depth" not in fields:
        return None
    rec, true = np.asarray(fields["depth"], np.float64), np.asarray(truth.steps["depth"], np.float64)
    if not np.isfinite(rec).all():
        return None
    return float(np.linalg.norm(rec - true) / np.linalg.norm(true))


def recon_path(arm: str, frame: str) -> Path:
    return RUNS / arm / f"{frame}.npz"  # RUNS: a module global, so the tests can point it elsewhere


def save_recon(arm: str, frame: str, fields: dict) -> None:
    path = recon_path(arm, frame)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **{k: np.asarray(v) for k, v in fields.items()})


def load_recon(arm: str, frame: str) -> dict:
    path = recon_path(arm, frame)
    if not path.is_file():
        raise SystemExit(f"{path} is missing: the swap controls of a new frame need every earlier frame's "
                         f"reconstruction; move docs/data/qgi150/{arm}.json away to start this arm over")
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def run_unit(name: str, arm: Arm, frames: Frames, ks: list[int], metrics: list, record: dict) -> dict:
    from gradleak_bench import plugins
    from gradleak_bench.records import GradientStream, ObservedEpisode

    picked = [frames.frame(k) for k in ks]
    streams = [frames.gradients(ep) for ep, _ in picked]
    tensors = {n: torch.cat([s.tensors[n][t:t + 1] for s, (_, t) in zip(streams, picked)])
               for n in streams[0].tensors}
    observed = ObservedEpisode(f"gap-{ks[0]}", np.arange(len(ks)), GradientStream(tensors))
    attack = plugins.load("attack", arm.attack, arm.params())
    if (reason := attack.supports(frames.info)) is not None:
        raise SystemExit(f"{arm.attack} does not support {frames.info.victim}: {reason}")
    unit: dict = {"frames": [frames.name(k) for k in ks], "machine_before": machine()}
    wall, cpu = time.perf_counter(), time.process_time()
    recon = attack.reconstruct(observed, frames.info)
    unit["wall_s"] = round(time.perf_counter() - wall, 2)
    unit["cpu_s"] = round(time.process_time() - cpu, 2)
    unit["machine_after"] = machine()
    record["settings"] = attack.settings()
    done = {r["frame"]: r for r in record["frames"]}
    snapshot_metrics = [m for m in metrics if m.name in SNAPSHOT_METRICS]
    for i, k in enumerate(ks):
        truth, frame = frames.truth(k), frames.name(k)
        fields = {key: np.asarray(v)[i:i + 1] for key, v in recon.fields.items()}
        save_recon(name, frame, fields)
        episode, t = frames.frame(k)
        values = score_fields(metrics, fields, truth)
        depth_psnr = values.get("depth_psnr")
        row = {"frame": frame, "k": k, "episode_id": episode.episode_id, "t": int(t),
               "pose": np.asarray(truth.steps["pose"])[0].tolist(), "values": values,
               "stage1": {"depth_psnr": depth_psnr, "depth_rel_error": depth_rel_error(fields, truth),
                          # None: depth is not a stage-1 variable (it passes a CNN), so it cannot tell
                          "solved": bool(depth_psnr is not None and depth_psnr >= SOLVED_DB)
                          if frames.stage1_reads_depth else None},
               "priors": {ref.name: score_fields(metrics, {f: np.asarray(v)[t:t + 1] for f, v in
                                                           ref.reconstruct(episode.length).items()}, truth)
                          for ref in frames.priors},
               "cross": {}}
        snaps = recon.extras.get("snapshots", {})
        if snaps:
            row["snapshots"] = {str(n): score_fields(snapshot_metrics, {f: np.asarray(v)[i:i + 1]
                                                                         for f, v in snaps[n].items()}, truth)
                                for n in arm.snapshots}
        # this frame's reconstruction against every other frame's truth, and theirs against this one's
        for other, other_row in done.items():
            other_truth = frames.truth(other_row["k"])
            row["cross"][other] = score_fields(metrics, fields, other_truth)
            other_row["cross"][frame] = score_fields(metrics, load_recon(name, other), truth)
        done[frame] = row
        record["frames"].append(row)
    return unit


def rows_for_summary(record: dict, metrics: list) -> list:
    """The frames as the runner's rows, in frame order, each with its swap control: the next frame's (cyclic)
    reconstruction scored against it (all frames here come from different layouts)."""
    from gradleak_bench.run.scorer import EpisodeRow

    def nan(values: dict) -> dict:  # a committed file holds NaN (no target in view, say) as null
        return {k: float("nan") if v is None else v for k, v in values.items()}

    frames = sorted(record["frames"], key=lambda r: r["k"])
    rows = []
    for i, f in enumerate(frames):
        partner = frames[(i + 1) % len(frames)]
        control = partner["cross"].get(f["frame"], {}) if partner is not f else {}
        rows.append(EpisodeRow(f["frame"], 0, 1, "ok", metrics=nan(f["values"]), control=nan(control),
                               references={k: nan(v) for k, v in f["priors"].items()}))
    return rows


def summarise(record: dict, metrics: list) -> dict:
    from gradleak_bench.run.scorer import summarise_metrics

    rows = rows_for_summary(record, metrics)
    results = summarise_metrics(rows, metrics, seed=0, control=len(rows) > 1)
    out: dict = {}
    for name, m in results.items():
        d = m.to_dict()
        entry = {k: d[k] for k in ("mean", "ci_low", "ci_high", "n", "higher_is_better", "failed_frames", "control",
                                   "leakage", "best_prior", "prior_leakage") if k in d}
        if m.best_prior:
            entry["best_prior_score"] = d["references"][m.best_prior]
        entry["priors"] = {k: v["mean"] for k, v in d.get("references", {}).items()}
        finite = [v for v in (r.metrics.get(name) for r in rows) if v is not None and np.isfinite(v)]
        if finite:
            entry["min"], entry["max"] = min(finite), max(finite)
        out[name] = entry
    record["metrics"] = out
    record["episodes"] = [{"episode_id": r.episode_id, "status": "ok",
                           "values": {n: [r.metrics.get(n), r.control.get(n),
                                          r.references.get(out[n].get("best_prior"), {}).get(n)
                                          if out.get(n, {}).get("best_prior") else None]
                                      for n in out}} for r in rows]
    record["episode_columns"] = ["metric", "swap control", "best prior"]
    by_stage1: dict = {}
    for label, solved in (("solved", True), ("unsolved", False)):
        part = [f for f in record["frames"] if f["stage1"]["solved"] is solved]
        group: dict = {"frames": [f["frame"] for f in part], "n": len(part)}
        for metric in ("rgb_psnr_y", "rgb_ssim_y", "depth_psnr"):
            values = [f["values"][metric] for f in part if f["values"].get(metric) is not None]
            group[metric] = {"mean": float(np.mean(values)), "min": min(values), "max": max(values)} if values else None
        by_stage1[label] = group
    record["by_stage1"] = by_stage1
    if any("snapshots" in f for f in record["frames"]):
        curve = {}
        for n in (*record["frames"][0]["snapshots"], "final"):
            per = [f["snapshots"][n] if n != "final" else f["values"] for f in record["frames"]]
            curve[str(n)] = {m: float(np.mean([p[m] for p in per])) for m in SNAPSHOT_METRICS}
        record["stage2_curve"] = curve
    return record


def strict(value):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from headline_leakage import finite

    return finite(value)


def run(name: str, n_frames: int, unit: int, arm: Arm | None = None, data: Path = DATA) -> None:
    from gradleak_bench import plugins, splits
    from gradleak_bench.metrics.registry import select_metrics
    from gradleak_bench.victims.zoo import get_victim

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from headline_leakage import QGI_METRICS

    arm = arm or ARMS[name]
    frames = Frames(arm.victim, arm.checkpoint)
    fields = plugins.load("attack", arm.attack, {}).fields
    metrics, _ = select_metrics([*QGI_METRICS, *EXTRA_METRICS], fields, arm.attack)
    target = data / f"{name}.json"
    spec = get_victim(TASK, arm.victim)
    config = {"attack": arm.attack, "task": TASK, "victim": arm.victim, "image_size": spec.image_size,
              "victim_config_hash": spec.config_hash(), "checkpoint": arm.checkpoint, "split": SPLIT,
              "dataset": frames.dataset.config.key, "dataset_identity": frames.dataset.identity,
              "params": arm.params(), "metrics": [m.name for m in metrics], "solved_depth_psnr_db": SOLVED_DB,
              # the frames of a unit share one seeded draw of initial images: the unit is part of the result
              "unit": unit,
              "frames_rule": "frame k = step k % T of the k-th episode of select_episodes(split)"}
    if not frames.stage1_reads_depth:  # only then, so the SB3-network arms' files keep their configuration
        config["stage1_reads_depth"] = False
    record = json.loads(target.read_text()) if target.is_file() else {}
    if record and record.get("config") != config:
        raise SystemExit(f"{target} was made with another configuration; move it away to start over")
    record.setdefault("config", config)
    record.setdefault("frames", [])
    record.setdefault("units", [])
    record["threads"] = torch.get_num_threads()
    official = splits.official_identity(frames.dataset.config.key) == frames.dataset.identity
    record["official_split"] = official
    record["note"] = ("development run: " + ("the frames come from the official split" if official else
                                             "the split is an unofficial draw (no official split)")
                      + "; attacks run unsealed in this process; the 2-core machine was shared (load in each unit)")
    done = {r["frame"] for r in record["frames"]}
    if n_frames > len(frames.ids):
        raise SystemExit(f"--frames {n_frames}: the split has {len(frames.ids)} episodes")
    todo = [k for k in range(n_frames) if frames.name(k) not in done]
    print(f"{name}: {len(done)} frames done, {len(todo)} to run", flush=True)
    for start in range(0, len(todo), unit):
        ks = todo[start:start + unit]
        record["units"].append(run_unit(name, arm, frames, ks, metrics, record))
        write(name, record, metrics, target)
        u = record["units"][-1]
        print(f"{name}: {len(record['frames'])}/{n_frames} frames, unit {u['cpu_s']:.0f} CPU s, "
              f"{u['wall_s']:.0f} s wall -> {target}", flush=True)
    if not todo and record["frames"]:
        write(name, record, metrics, target)  # re-summarised: the file follows this script's format


def write(name: str, record: dict, metrics: list, target: Path) -> None:
    record["arm"] = name
    record["frames"].sort(key=lambda r: r["k"])
    record["wall_s_total"] = round(sum(u["wall_s"] for u in record["units"]), 1)
    record["cpu_s_total"] = round(sum(u["cpu_s"] for u in record["units"]), 1)
    record["cpu_s_per_frame"] = round(record["cpu_s_total"] / len(record["frames"]), 1)
    record["wall_s_per_frame"] = round(record["wall_s_total"] / len(record["frames"]), 1)
    summarise(record, metrics)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(strict(record), indent=1, allow_nan=False) + "\n")
    tmp.replace(target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="*", help="arms to run, in order (see --list)")
    parser.add_argument("--frames", type=int, default=2, help="frames (a prefix of the frame rule; default 2)")
    parser.add_argument("--unit", type=int, default=1, help="frames per batched run, written when it finishes")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        for name, arm in ARMS.items():
            print(name, arm)
        return 0
    if unknown := [a for a in args.arms if a not in ARMS]:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; see --list")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for name in args.arms:
        run(name, args.frames, args.unit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
