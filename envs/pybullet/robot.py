"""A light kinematic mobile robot: a collision cylinder that the camera never draws."""
from __future__ import annotations

import math

import pybullet as p

from gradleak_bench.envs.pybullet.apartment import ROBOT_HEIGHT, ROBOT_RADIUS
from gradleak_bench.envs.pybullet.scene import invisible_visual

MAX_PITCH_DEG = 30.0
# The cylinder floats just above the floor so the floor never counts as a collision.
_FLOOR_CLEARANCE = 0.03


class Robot:
    """Kinematic robot in one PyBullet client.

    Moves are teleports tested with PyBullet collision queries at the midpoint and the end of the move
    (a 0.25 m step is shorter than the robot's diameter, so no 10 cm wall fits between the tested poses);
    a blocked move leaves the robot where it was.

    Args:
        client: PyBullet client id.
        obstacles: Bodies the robot may collide with.
        radius: Cylinder radius in metres.
        height: Cylinder height in metres.
    """

    def __init__(self, client: int, obstacles: tuple[int, ...], radius: float = ROBOT_RADIUS,
                 height: float = ROBOT_HEIGHT):
        self.client = client
        self.radius = radius
        self._z = _FLOOR_CLEARANCE + height / 2
        shape = p.createCollisionShape(p.GEOM_CYLINDER, radius=radius, height=height, physicsClientId=client)
        # A transparent stand-in visual: without any visual shape TinyRenderer would draw the cylinder.
        self.body = p.createMultiBody(0, shape, invisible_visual(client), (0.0, 0.0, self._z), physicsClientId=client)
        self._obstacles = frozenset(obstacles)
        self.x = self.y = self.yaw = self.pitch = 0.0

    def set_obstacles(self, obstacles: tuple[int, ...]) -> None:
        """Replace the set of bodies the robot collides with (e.g. after a prop is added)."""
        self._obstacles = frozenset(obstacles)

    def set_pose(self, x: float, y: float, yaw: float, pitch: float = 0.0) -> None:
        """Teleport without a collision test."""
        self.x, self.y, self.yaw, self.pitch = float(x), float(y), _wrap(float(yaw)), float(pitch)
        self._place(self.x, self.y)

    def move(self, forward: float, strafe: float = 0.0) -> bool:
        """Translate in the robot frame (``strafe`` positive to the left).

        Returns:
            Whether the move was blocked (then the robot has not moved).
        """
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        nx = self.x + forward * c - strafe * s
        ny = self.y + forward * s + strafe * c
        mx, my = (self.x + nx) / 2, (self.y + ny) / 2
        candidates = self._candidates(min(self.x, nx), min(self.y, ny), max(self.x, nx), max(self.y, ny))
        blocked = bool(candidates) and (self._hits(mx, my, candidates) or self._hits(nx, ny, candidates))
        if blocked:
            self._place(self.x, self.y)
        else:
            self.x, self.y = nx, ny
        return blocked

    def collides_at(self, x: float, y: float) -> bool:
        """Whether the robot would touch an obstacle at (x, y); the robot stays where it is."""
        hit = self._hits(x, y, self._candidates(x, y, x, y))
        self._place(self.x, self.y)
        return hit

    def rotate(self, degrees: float) -> None:
        """Turn in place (counter-clockwise positive); a cylinder turning in place never collides."""
        self.yaw = _wrap(self.yaw + math.radians(degrees))

    def look(self, degrees: float) -> None:
        """Tilt the camera (up positive), clamped to +-30 degrees."""
        self.pitch = max(-MAX_PITCH_DEG, min(MAX_PITCH_DEG, self.pitch + degrees))

    def _candidates(self, x0: float, y0: float, x1: float, y1: float) -> list[int]:
        r = self.radius + 0.02
        found = p.getOverlappingObjects((x0 - r, y0 - r, 0.0), (x1 + r, y1 + r, 2 * self._z),
                                        physicsClientId=self.client) or ()
        return sorted({body for body, _ in found if body in self._obstacles})

    def _hits(self, x: float, y: float, bodies: list[int]) -> bool:
        self._place(x, y)
        return any(p.getClosestPoints(self.body, b, 0.0, physicsClientId=self.client) for b in bodies)

    def _place(self, x: float, y: float) -> None:
        p.resetBasePositionAndOrientation(self.body, (x, y, self._z), (0, 0, 0, 1), physicsClientId=self.client)


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi
