"""Render ``docs/img/layouts.png``: for a few train and test layouts, the robot's RGB and depth views and a
top-down map (free space light, obstacles dark, room outlines, the robot as a red dot with its heading).

Run: ``python docs/make_task_figures.py``.
"""
from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image, ImageDraw

from gradleak_bench.envs.pybullet.household import PointNavEnv
from gradleak_bench.splits import layouts

SIZE = 128
PANEL = 160
LAYOUTS = (("train", layouts("train")[0]), ("train", layouts("train")[1]), ("train", layouts("train")[5]),
           ("test", layouts("test")[0]), ("test", layouts("test")[1]), ("test", layouts("test")[2]))


def depth_image(depth: np.ndarray) -> np.ndarray:
    grey = (255 * (1.0 - np.clip(depth / 6.0, 0.0, 1.0))).astype(np.uint8)
    return np.repeat(grey[:, :, None], 3, axis=2)


def top_down(env: PointNavEnv) -> Image.Image:
    apt = env.apartment
    free = apt.free[::-1]  # north up
    img = np.where(free[:, :, None], np.uint8(235), np.uint8(70)).repeat(3, axis=2).astype(np.uint8)
    scale = PANEL / max(free.shape)
    im = Image.fromarray(img).resize((int(free.shape[1] * scale), int(free.shape[0] * scale)), Image.NEAREST)
    draw = ImageDraw.Draw(im)
    h = im.size[1]

    def px(x: float, y: float) -> tuple[float, float]:
        return x / apt.cell * scale, h - y / apt.cell * scale

    for room in apt.rooms:
        x0, y0, x1, y1 = room.inner
        draw.rectangle([px(x0, y1), px(x1, y0)], outline=(60, 90, 200))
    r = env.robot
    cx, cy = px(r.x, r.y)
    draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=(220, 30, 30))
    draw.line([cx, cy, cx + 10 * math.cos(r.yaw), cy - 10 * math.sin(r.yaw)], fill=(220, 30, 30), width=2)
    gx, gy = px(*env.goal_position)
    draw.rectangle([gx - 3, gy - 3, gx + 3, gy + 3], fill=(255, 140, 0))
    canvas = Image.new("RGB", (PANEL, PANEL), (255, 255, 255))
    canvas.paste(im, (0, 0))
    return canvas


def main() -> None:
    rows = []
    for split, layout in LAYOUTS:
        env = PointNavEnv(layouts=[layout], image_size=SIZE)
        env.reset(seed=1, options={"layout_id": layout})
        for _ in range(3):  # turn towards the goal so the beacon tends to show
            env.step(1 if float(env._goal_vector()[1]) > 0 else 2)
        obs, _, _, _, info = env.step(1 if float(info_bearing(env)) > 0 else 2)
        row = Image.new("RGB", (2 * SIZE + PANEL + 20, PANEL), (255, 255, 255))
        row.paste(Image.fromarray(obs), (0, 0))
        row.paste(Image.fromarray(depth_image(info["depth"])), (SIZE + 5, 0))
        row.paste(top_down(env), (2 * SIZE + 15, 0))
        ImageDraw.Draw(row).text((2, SIZE + 4), f"layout {layout} ({split})", fill=(0, 0, 0))
        rows.append(row)
        env.close()
    out = Image.new("RGB", (rows[0].size[0], sum(r.size[1] for r in rows)), (255, 255, 255))
    for k, row in enumerate(rows):
        out.paste(row, (0, k * PANEL))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "img", "layouts.png")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    out.save(path)
    print(f"wrote {path}")


def info_bearing(env: PointNavEnv) -> float:
    return float(env._goal_vector()[1])


if __name__ == "__main__":
    main()
