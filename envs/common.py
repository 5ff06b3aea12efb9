"""Backend-independent pieces of the tasks: the PointNav goal vector, the ActivePerception box and visibility
score, and fitting a simulator's frame to the task's image size.

Every backend (PyBullet, AI2-THOR, Habitat) computes its rewards and vector observations with these same
functions, so a task means the same thing whichever simulator renders it.
"""
from __future__ import annotations

import math

import numpy as np
from PIL import Image

FAR = 10.0
MAX_PITCH_DEG = 30.0
from gradleak_bench.tasks import LOOK_DEG, MOVE_STEP, TURN_DEG  # noqa: E402,F401  the adapters' primitive steps
GOOD_VIEW_FRACTION = 0.04


def wrap_angle(angle: float) -> float:
    """An angle in radians wrapped to [-pi, pi)."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


def goal_vector(x: float, y: float, yaw: float, goal: np.ndarray) -> np.ndarray:
    """(distance m, bearing rad in the robot frame, counter-clockwise positive) of ``goal`` from the pose."""
    dx, dy = float(goal[0]) - x, float(goal[1]) - y
    bearing = (math.atan2(dy, dx) - yaw + math.pi) % (2 * math.pi) - math.pi
    return np.array([math.hypot(dx, dy), bearing], dtype=np.float32)


def target_view(mask: np.ndarray) -> tuple[np.ndarray, float]:
    """(bbox in [-1, 1], visibility score in [0, 1]) of a target from its (n, n) boolean pixel mask.

    ``bbox`` is (x0, y0, x1, y1) of the target's pixels, x right and y down, all zeros when it is not in
    view; the score is ``min(1, sqrt(area fraction / GOOD_VIEW_FRACTION))`` times how centred the target is,
    ``max(0, 1 - |centre| / sqrt(2))``.
    """
    if not mask.any():
        return np.zeros(4, dtype=np.float32), 0.0
    n = mask.shape[0]
    rows, cols = np.nonzero(mask)
    bbox = np.array([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], dtype=np.float32) * (2.0 / n) - 1.0
    size = min(1.0, math.sqrt(mask.mean() / GOOD_VIEW_FRACTION))
    centre = np.array([cols.mean() + 0.5, rows.mean() + 0.5]) * (2.0 / n) - 1.0
    centred = max(0.0, 1.0 - float(np.linalg.norm(centre)) / math.sqrt(2.0))
    return bbox, size * centred


def fit_image(image: np.ndarray, size: int, kind: str) -> np.ndarray:
    """Centre-crop a simulator frame to a square and resize it to ``size`` x ``size``.

    ``kind`` is ``rgb`` (uint8 (H, W, 3+); area averaging, alpha dropped), ``depth`` (float metres (H, W);
    nearest pixel, so no depth is invented at edges, clipped to [0, FAR]) or ``mask`` (boolean (H, W); a pixel
    is the target's when most of its area is).
    """
    image = np.asarray(image)
    h, w = image.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    image = image[top:top + side, left:left + side]
    if kind == "rgb":
        image = np.ascontiguousarray(image[..., :3], dtype=np.uint8)
        if side != size:
            image = np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BOX))
        return image.copy()
    if kind == "depth":
        depth = np.ascontiguousarray(image, dtype=np.float32)
        if depth.ndim == 3:
            depth = depth[..., 0]
        if side != size:
            depth = np.asarray(Image.fromarray(depth).resize((size, size), Image.Resampling.NEAREST))
        depth = np.nan_to_num(depth, nan=FAR, posinf=FAR, neginf=0.0)
        return np.clip(depth, 0.0, FAR).astype(np.float32)
    if kind == "mask":
        mask = np.ascontiguousarray(image, dtype=bool)
        if side == size:
            return mask.copy()
        cover = np.asarray(Image.fromarray(mask.astype(np.float32)).resize((size, size), Image.Resampling.BOX))
        return cover >= 0.5
    raise ValueError(f"unknown frame kind {kind!r}: use 'rgb', 'depth' or 'mask'.")
