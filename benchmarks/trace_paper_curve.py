"""The ``paper`` preset of TRACE, trained as far as this CPU allows: the learning curve, written as it goes.

The paper preset is the published scale (latent 1024, 6 layers, FF 4096, sequence length 8) with the paper's
training (learned full-gradient encoder, scheduled sampling to 0.8, rollout term, augmentation; adaptive,
which behind no defense means exact gradients). Its full budget (96 train layouts x 125 episodes, 60 epochs)
is a GPU job; here it trains on ``--max-episodes`` auxiliary sequences of PointNav/ppo (trained), one epoch
per call (``stop_after=1``: each epoch is checkpointed, so the run resumes where it stopped), until
``--minutes`` of wall time are spent or the epochs are done. After every epoch the attacker's own
``curve.json`` (per epoch: train loss and its terms, sampling probability, val PSNR and action accuracy,
seconds, sequences/s) is copied to docs/data/trace_paper_curve.json with the thread count, the load average
and an *extrapolation* of the full budget's training time from the measured sequences/s (stated as such).

Run: OMP_NUM_THREADS=1 python benchmarks/trace_paper_curve.py [--max-episodes 96] [--minutes 30]
     python benchmarks/trace_paper_curve.py --render   # docs/img/trace_paper_curve.png from the committed curves
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from gradleak_bench.baselines.attacks import trace as tr
from gradleak_bench.baselines.attacks.trace.config import PRESETS, defense_identity
from gradleak_bench.baselines.attacks.trace.training import CURVE
from gradleak_bench.errors import GradleakError
from gradleak_bench.run.auxiliary import AuxiliaryData
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.card import weights_sha256
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "data" / "trace_paper_curve.json"
PLOT = ROOT / "docs" / "img" / "trace_paper_curve.png"
TRAIN_LAYOUTS = 96  # PointNav's train layouts (docs/tasks.md)
# the quick fits beside it, same victim (their curve.json, committed): analytic and learned encoder
QUICK_CURVES = {"quick, analytic encoder": ROOT / "docs" / "data" / "trace_quick_curve_ppo.json",
                "quick, learned encoder": ROOT / "docs" / "data" / "trace_learned_encoder_curve.json"}


def render() -> None:
    """Per epoch: validation PSNR (autoregressive), training MSE and validation action accuracy of the
    paper-preset run beside the two quick fits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paper = json.loads(OUT.read_text())["curve"]
    curves = {f"paper preset (108M parameters, {paper['train_sequences']} sequences)": paper}
    for label, path in QUICK_CURVES.items():
        curve = json.loads(path.read_text())
        curves[f"{label} ({curve['train_sequences']} sequences)"] = curve
    panels = [("val_psnr_autoregressive", "val RGB PSNR, autoregressive (dB)"), ("mse", "train MSE"),
              ("val_action_accuracy", "val action accuracy")]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.8))
    for ax, (key, label) in zip(axes, panels):
        for name, curve in curves.items():
            history = curve["history"]
            ax.plot([h["epoch"] for h in history], [h[key] for h in history], marker=".", label=name)
        ax.set_xlabel("epoch")
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"TRACE on PointNav/ppo (trained): the paper preset's first {paper['epochs_done']} of "
                 f"{paper['epochs_planned']} epochs beside the quick fits (val: {paper['val_sequences']} vs "
                 "12 sequences)", fontsize=10)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    print("wrote", PLOT.relative_to(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-episodes", type=int, default=96)
    parser.add_argument("--val-episodes", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--render", action="store_true", help="only redraw docs/img/trace_paper_curve.png")
    args = parser.parse_args()
    if args.render:
        render()
        return
    threads = torch.get_num_threads()
    victim = load_victim("PointNav", "ppo", "trained")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", victim.spec.image_size)[0])
    info, aux = victim_info(victim, gradients), AuxiliaryData(victim, gradients)
    overrides = {"max_episodes": args.max_episodes, "val_episodes": args.val_episodes}
    weights = weights_sha256("PointNav", "ppo", "trained")
    start, load_start = time.time(), os.getloadavg()[0]
    # per epoch, this process's CPU seconds (the epoch's training and validation): what an epoch costs on a
    # core of its own, whatever the machine's load did to the wall time
    earlier = json.loads(OUT.read_text()) if OUT.is_file() else {}
    # another data cap, or a victim retrained since (issue 37), is another run: its epochs cost otherwise
    if earlier.get("overrides") != overrides or earlier.get("weights_sha256") != weights:
        earlier = {}
    cpu_per_epoch: dict[str, float] = earlier.get("cpu_seconds_per_epoch", {})
    while True:
        attack = tr.TRACE(preset="paper", progress=False, stop_after=1, **overrides)
        cpu_start = time.process_time()
        try:
            attack.fit(info, aux)
            done = True
        except GradleakError as exc:
            if "stopped after epoch" not in str(exc):
                raise
            done = False
        identity, layout = tr.victim_identity(info), tr.gradient_layout(info)
        curve = attack.cache(identity, layout, defense_identity(attack.config, aux)).load_json(CURVE)
        history = curve["history"]
        if str(curve["epochs_done"]) not in cpu_per_epoch:  # the first call also collects: not an epoch's cost
            cpu_per_epoch[str(curve["epochs_done"])] = round(time.process_time() - cpu_start, 1)
        rate = history[-1]["sequences_per_s"]
        cpu = sorted(cpu_per_epoch.values())[len(cpu_per_epoch) // 2]  # the median epoch
        paper = PRESETS["paper"]
        full = TRAIN_LAYOUTS * paper["episodes_per_layout"] * paper["epochs"]
        per_sequence = cpu / curve["train_sequences"]
        OUT.write_text(json.dumps({
            "what": "TRACE paper preset on PointNav/ppo (trained), data capped; learning curve so far",
            "command": f"OMP_NUM_THREADS={threads} python benchmarks/trace_paper_curve.py --max-episodes "
                       f"{args.max_episodes} --val-episodes {args.val_episodes} --minutes {args.minutes}",
            "overrides": overrides, "weights_sha256": weights, "threads": threads,
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "curve": curve, "cpu_seconds_per_epoch": cpu_per_epoch,
            "extrapolation": {
                "note": "an extrapolation, not a measurement: the paper budget (96 layouts x 125 sequences x 60 "
                        "epochs) at this run's median CPU seconds per sequence (training + its small validation; "
                        "the first epoch's call also collects, so it counts its collection) and at the last "
                        "epoch's wall-clock sequences/s under this run's load; collection not included",
                "paper_budget_sequence_epochs": full, "cpu_seconds_per_sequence": round(per_sequence, 2),
                "cpu_hours_one_core": round(full * per_sequence / 3600, 1),
                "wall_sequences_per_s_under_load": rate, "wall_hours_under_this_load": round(full / rate / 3600, 1)},
        }, indent=1) + "\n")
        print(f"epoch {curve['epochs_done']}: loss {history[-1]['loss']:.4f}, val PSNR "
              f"{history[-1]['val_psnr_autoregressive']:.2f} dB, {history[-1]['seconds']:.0f} s", flush=True)
        if done or time.time() - start > args.minutes * 60:
            break


if __name__ == "__main__":
    main()
