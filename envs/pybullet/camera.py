"""Egocentric RGB-D(-segmentation) camera rendered with PyBullet's TinyRenderer."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pybullet as p

# Fixed lighting: a light from the side gives walls of different orientation different shades (a depth cue)
# and is part of what makes frames reproducible.
_LIGHT = dict(lightDirection=(0.4, 0.7, 1.0), lightColor=(1.0, 1.0, 1.0), lightDistance=10.0,
              lightAmbientCoeff=0.65, lightDiffuseCoeff=0.4, lightSpecularCoeff=0.0, shadow=0)


@dataclass(frozen=True)
class Frame:
    """One rendered view: ``rgb`` (H, W, 3) uint8, ``depth`` (H, W) float32 metres, ``seg`` (H, W) int32
    body ids (-1 for background) or None when segmentation was not asked for."""

    rgb: np.ndarray
    depth: np.ndarray
    seg: np.ndarray | None


class Camera:
    """Pinhole camera looking along the robot's heading, tilted by its pitch.

    Args:
        client: PyBullet client id.
        size: Image width and height in pixels.
        fov: Vertical (= horizontal) field of view in degrees.
        height: Camera height above the floor in metres.
        near: Near clipping distance in metres.
        far: Far clipping distance in metres; depth is clipped to it.
    """

    def __init__(self, client: int, size: int = 64, fov: float = 90.0, height: float = 1.0,
                 near: float = 0.05, far: float = 10.0):
        self.client, self.size, self.fov, self.height, self.near, self.far = client, size, fov, height, near, far
        self._proj = p.computeProjectionMatrixFOV(fov, 1.0, near, far)

    def render(self, x: float, y: float, yaw: float, pitch_deg: float, segmentation: bool = False) -> Frame:
        """Render from the robot pose (x, y, yaw radians) with camera pitch in degrees."""
        pitch = math.radians(pitch_deg)
        forward = (math.cos(pitch) * math.cos(yaw), math.cos(pitch) * math.sin(yaw), math.sin(pitch))
        up = (-math.sin(pitch) * math.cos(yaw), -math.sin(pitch) * math.sin(yaw), math.cos(pitch))
        eye = (x, y, self.height)
        target = (x + forward[0], y + forward[1], self.height + forward[2])
        view = p.computeViewMatrix(eye, target, up, physicsClientId=self.client)
        flags = 0 if segmentation else p.ER_NO_SEGMENTATION_MASK
        _, _, rgba, zbuf, seg = p.getCameraImage(self.size, self.size, view, self._proj,
                                                 renderer=p.ER_TINY_RENDERER, flags=flags,
                                                 physicsClientId=self.client, **_LIGHT)
        n = self.size
        rgb = np.asarray(rgba, dtype=np.uint8).reshape(n, n, 4)[:, :, :3].copy()
        depth = self.linear_depth(np.asarray(zbuf, dtype=np.float32).reshape(n, n))
        mask = np.asarray(seg, dtype=np.int32).reshape(n, n) if segmentation else None
        return Frame(rgb, depth, mask)

    def linear_depth(self, zbuf: np.ndarray) -> np.ndarray:
        """Metric depth (along the optical axis) from an OpenGL-style [0, 1] z-buffer."""
        near, far = np.float32(self.near), np.float32(self.far)
        depth = far * near / (far - (far - near) * zbuf)
        return np.clip(depth, 0.0, far).astype(np.float32)
