"""Render ``docs/img/learning_curves.png``: every published victim's learning curve (``curve.json`` beside its
checkpoints: success on the same 32 val episodes every 32,768 training steps, with 95% Wilson intervals) and,
dashed, the random policy's success on those episodes.

Run: ``python docs/make_training_curves.py`` (reads committed files only; no simulator).
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "learning_curves.png"


def curves() -> list[dict]:
    found = []
    for path in sorted((ROOT / "envs" / "checkpoints").glob("*/*/curve.json")):
        data = json.loads(path.read_text())
        data.setdefault("victim", f"{path.parent.parent.name}/{path.parent.name}")
        found.append(data)
    return found


def main() -> None:
    data = curves()
    if not data:
        raise SystemExit("no curve.json under envs/checkpoints: publish a trained victim first (docs/tasks.md)")
    cols = min(3, len(data))
    rows = (len(data) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, curve in zip(axes.flat, data):
        steps = [p["timesteps"] / 1000 for p in curve["points"]]
        rate = [100 * p["success_rate"] for p in curve["points"]]
        lo = [100 * p["success_ci95"][0] for p in curve["points"]]
        hi = [100 * p["success_ci95"][1] for p in curve["points"]]
        ax.fill_between(steps, lo, hi, alpha=0.25, color="tab:blue", linewidth=0)
        ax.plot(steps, rate, marker="o", markersize=3, color="tab:blue", label="victim")
        random = curve.get("random")
        if random:
            ax.axhline(100 * random["success_rate"], color="grey", linestyle="--", label="random policy")
            ax.axhspan(100 * random["success_ci95"][0], 100 * random["success_ci95"][1], color="grey", alpha=0.12)
        ax.set_title(curve["victim"], fontsize=10)
        ax.set_xlabel("training steps (thousands)")
        ax.set_ylabel(f"val success % ({curve['episodes']} episodes)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(data):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(OUT)


if __name__ == "__main__":
    main()
