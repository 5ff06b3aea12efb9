"""Build an :class:`~gradleak_bench.envs.pybullet.apartment.Apartment` into a PyBullet client.

Rendering cost of PyBullet's TinyRenderer grows with the screen area of every triangle drawn, hidden or
not, so the static world is drawn as few, one-sided meshes: per room one floor mesh, one wall mesh holding
only the faces that look into the room (back faces are culled), and one furniture mesh whose colours come
from a small palette texture. Collision is separate: one compound box body per room without any visual
shape, plus the props' own collision shapes.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np
import pybullet as p
import pybullet_data
from PIL import Image

from gradleak_bench.envs.pybullet.apartment import Apartment, Box, Prop, PropType, Room, Texture

_FACE_AXES = {
    # face: (normal, tangent u, tangent v) with u x v = normal, so corners run counter-clockwise seen from
    # outside, which is what TinyRenderer keeps when it culls back faces.
    "+x": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "-x": ((-1, 0, 0), (0, -1, 0), (0, 0, 1)),
    "+y": ((0, 1, 0), (-1, 0, 0), (0, 0, 1)),
    "-y": ((0, -1, 0), (1, 0, 0), (0, 0, 1)),
    "+z": ((0, 0, 1), (1, 0, 0), (0, 1, 0)),
    "-z": ((0, 0, -1), (0, 1, 0), (1, 0, 0)),
}
_PALETTE_SIZE = 16
_TEXTURE_PIXELS = 64
_texture_dir: str | None = None
_texture_paths: dict[Texture, str] = {}


@dataclass
class Scene:
    """Body ids of a built apartment in one client.

    Attributes:
        apartment: What was built.
        client: The PyBullet client id.
        obstacles: Bodies the robot collides with (room compounds and props), ascending.
        props: Prop bodies in ``apartment.props`` order.
    """

    apartment: Apartment
    client: int
    obstacles: tuple[int, ...]
    props: tuple[int, ...]
    room_bodies: tuple[tuple[int, ...], ...]
    colours: dict[int, tuple[tuple[int, tuple[float, ...]], ...]]  # body -> (shape index, rgba) to restore
    shown: set[int]

    def show_rooms(self, rooms: tuple[int, ...]) -> None:
        """Draw only the bodies of ``rooms``.

        Hidden bodies get alpha 0, which TinyRenderer skips entirely; rooms behind solid walls would
        otherwise cost as much as the room in view, since every triangle is rasterised, occluded or not.
        """
        wanted = set(rooms)
        for room in sorted(self.shown ^ wanted):
            for body in self.room_bodies[room]:
                for shape, rgba in self.colours[body]:
                    colour = rgba if room in wanted else (*rgba[:3], 0.0)
                    p.changeVisualShape(body, -1, shapeIndex=shape, rgbaColor=colour, physicsClientId=self.client)
        self.shown = wanted


def build_scene(client: int, apartment: Apartment) -> Scene:
    """Reset ``client`` and build ``apartment`` into it.

    Args:
        client: A connected PyBullet client id (DIRECT mode).
        apartment: The apartment to build.

    Returns:
        The scene's body ids.
    """
    p.resetSimulation(physicsClientId=client)
    p.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=client)
    textures: dict[Texture, int] = {}
    obstacles = []
    room_bodies: list[list[int]] = []
    for room in apartment.rooms:
        room_bodies.append(_build_room_visuals(client, room, textures))
        obstacles.append(_build_room_collision(client, room))
    props = tuple(load_prop(client, prop) for prop in apartment.props)
    for prop, body in zip(apartment.props, props):
        room_bodies[prop.room].append(body)
    colours = {body: visual_colours(client, body) for bodies in room_bodies for body in bodies}
    return Scene(apartment, client, tuple(sorted(obstacles + list(props))), props,
                 tuple(tuple(b) for b in room_bodies), colours, set(range(len(apartment.rooms))))


def visual_colours(client: int, body: int) -> tuple[tuple[int, tuple[float, ...]], ...]:
    """(shape index, rgba) of each visual shape of a single-link body, in shape order."""
    data = p.getVisualShapeData(body, physicsClientId=client)
    return tuple((k, tuple(float(v) for v in d[7])) for k, d in enumerate(data) if d[1] == -1)


def load_prop(client: int, prop: Prop) -> int:
    """Load a ``pybullet_data`` prop as a fixed body resting on its support surface, centred on (x, y)."""
    return place_prop(client, prop.kind, prop.x, prop.y, prop.z, prop.yaw)


def place_prop(client: int, kind: PropType, x: float, y: float, z: float, yaw: float) -> int:
    """Load ``kind`` so that its bounding box is centred on (x, y) and its bottom touches height ``z``."""
    orn = p.getQuaternionFromEuler((0.0, 0.0, yaw))
    body = p.loadURDF(kind.urdf, (x, y, z), orn, useFixedBase=True, globalScaling=kind.scale,
                      physicsClientId=client)
    lo, hi = _visual_aabb(client, body)
    shift = (x - (lo[0] + hi[0]) / 2, y - (lo[1] + hi[1]) / 2, z - lo[2])
    p.resetBasePositionAndOrientation(body, (x + shift[0], y + shift[1], z + shift[2]), orn, physicsClientId=client)
    return body


def _visual_aabb(client: int, body: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = p.getAABB(body, -1, physicsClientId=client)
    return np.asarray(lo), np.asarray(hi)


# ---------------------------------------------------------------- meshes
def _face(box: Box, face: str) -> tuple[np.ndarray, np.ndarray]:
    """Corners (4, 3) and the outward normal of one face of ``box``."""
    n, u, v = (np.asarray(a, dtype=float) for a in _FACE_AXES[face])
    c, h = np.asarray(box.center, dtype=float), np.asarray(box.half, dtype=float)
    hn, hu, hv = abs(n @ h), abs(u @ h), abs(v @ h)
    centre = c + n * hn
    corners = np.stack([centre + su * hu * u + sv * hv * v for su, sv in ((-1, -1), (1, -1), (1, 1), (-1, 1))])
    return corners, n


class _MeshBuilder:
    """Accumulates quads into the vertex/index/normal/uv lists of ``createVisualShape(GEOM_MESH)``."""

    def __init__(self) -> None:
        self.vertices: list[list[float]] = []
        self.normals: list[list[float]] = []
        self.uvs: list[list[float]] = []
        self.indices: list[int] = []

    def quad(self, corners: np.ndarray, normal: np.ndarray, uvs: np.ndarray) -> None:
        base = len(self.vertices)
        self.vertices.extend(corners.round(5).tolist())
        self.normals.extend([normal.tolist()] * 4)
        self.uvs.extend(uvs.round(5).tolist())
        self.indices.extend([base, base + 1, base + 2, base, base + 2, base + 3])

    def body(self, client: int, texture: int | None) -> int | None:
        if not self.indices:
            return None
        shape = p.createVisualShape(p.GEOM_MESH, vertices=self.vertices, indices=self.indices,
                                    normals=self.normals, uvs=self.uvs, rgbaColor=(1, 1, 1, 1),
                                    physicsClientId=client)
        body = p.createMultiBody(0, -1, shape, physicsClientId=client)
        if texture is not None:
            p.changeVisualShape(body, -1, textureUniqueId=texture, physicsClientId=client)
        return body


def _world_uv(corners: np.ndarray, normal: np.ndarray, tile: float) -> np.ndarray:
    """UVs anchored to world coordinates, so textures tile at a fixed size and continue across pieces."""
    if abs(normal[2]) > 0.5:
        return corners[:, :2] / tile
    along = corners[:, 1] * normal[0] - corners[:, 0] * normal[1]
    return np.stack([along, corners[:, 2]], axis=1) / tile


def _build_room_visuals(client: int, room: Room, textures: dict[Texture, int]) -> list[int]:
    floor = _MeshBuilder()
    x0, y0, x1, y1 = room.inner
    for rx0, ry0, rx1, ry1 in ((x0, y0, x1, y1),) + room.thresholds:
        box = Box(((rx0 + rx1) / 2, (ry0 + ry1) / 2, -0.01), ((rx1 - rx0) / 2, (ry1 - ry0) / 2, 0.01), (0, 0, 0))
        corners, n = _face(box, "+z")
        floor.quad(corners, n, _world_uv(corners, n, room.floor.tile_m))
    bodies = [floor.body(client, _texture(client, room.floor, textures))]

    walls = _MeshBuilder()
    for box in room.walls:
        for face in box.faces:
            corners, n = _face(box, face)
            walls.quad(corners, n, _world_uv(corners, n, room.wall.tile_m))
    bodies.append(walls.body(client, _texture(client, room.wall, textures)))

    palette = _palette(room.furniture)
    furniture = _MeshBuilder()
    for box in room.furniture:
        u = (palette.index(box.colour) + 0.5) / _PALETTE_SIZE
        for face in box.faces:
            corners, n = _face(box, face)
            furniture.quad(corners, n, np.tile([u, 0.5], (4, 1)))
    if palette:
        bodies.append(furniture.body(client, _texture(client, Texture("palette", colours=tuple(palette)), textures)))
    return [b for b in bodies if b is not None]


def _palette(boxes: tuple[Box, ...]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for b in boxes:
        if b.faces and b.colour not in out:
            out.append(b.colour)
    return out[:_PALETTE_SIZE]


def _build_room_collision(client: int, room: Room) -> int:
    boxes = room.walls + room.furniture
    shape = p.createCollisionShapeArray(
        shapeTypes=[p.GEOM_BOX] * len(boxes), halfExtents=[list(b.half) for b in boxes],
        collisionFramePositions=[list(b.center) for b in boxes], physicsClientId=client)
    return p.createMultiBody(0, shape, invisible_visual(client), physicsClientId=client)


def invisible_visual(client: int) -> int:
    """A fully transparent visual shape for collision-only bodies.

    TinyRenderer draws the collision shapes of a body that has no visual shape; a visual with alpha 0 is
    skipped entirely, which makes the body both invisible and free to render.
    """
    return p.createVisualShape(p.GEOM_SPHERE, radius=0.01, rgbaColor=(0, 0, 0, 0), physicsClientId=client)


# ---------------------------------------------------------------- textures
def _texture(client: int, spec: Texture, cache: dict[Texture, int]) -> int:
    if spec not in cache:
        cache[spec] = p.loadTexture(texture_path(spec), physicsClientId=client)
    return cache[spec]


def texture_path(spec: Texture) -> str:
    """The image file PyBullet loads for ``spec``, made once per process: a training environment builds a new
    layout at almost every reset, and each build loads a dozen textures."""
    path = _texture_paths.get(spec)
    if path is None:
        path = _decoded_copy(spec.name) if spec.kind == "file" else texture_file(spec)
        _texture_paths[spec] = path
    return path


def _decoded_copy(name: str) -> str:
    """``pybullet_data``'s PNG ``name`` as an uncompressed TGA in this process's temp dir (once).

    PyBullet decodes an image file at every ``loadTexture``: ``table/table.png`` (1024x768) took 49 ms of the
    ~110 ms of a layout build that uses it, the same pixels from an uncompressed file about 11 ms. PNG is
    lossless and both decoders return its 8-bit RGB(A) values unchanged, so every frame is the same bit for bit
    (every layout, both tasks, 64x64 and 84x84: ``benchmarks/bench_layout_build.py --compare``). Any other
    format or mode (a palette, 16 bits, JPEG's lossy decoders) is loaded from the original file, as before.
    """
    source = os.path.join(pybullet_data.getDataPath(), name)
    with Image.open(source) as image:
        if image.format != "PNG" or image.mode not in ("RGB", "RGBA"):
            return name  # PyBullet finds it on the pybullet_data search path, as it always did
        image.load()
        digest = hashlib.sha256(image.tobytes() + repr((image.mode, image.size)).encode()).hexdigest()[:20]
        path = os.path.join(_temp_dir(), f"file_{digest}.tga")
        if not os.path.exists(path):
            tmp = path + ".part"
            image.save(tmp, format="TGA", compression=None)
            os.replace(tmp, path)
    return path


def texture_file(spec: Texture) -> str:
    """Write the procedural texture ``spec`` as a PNG in this process's temp dir (once) and return its path."""
    image = texture_image(spec)
    digest = hashlib.sha256(image.tobytes() + repr(image.shape).encode()).hexdigest()[:20]
    path = os.path.join(_temp_dir(), f"{spec.kind}_{digest}.png")
    if not os.path.exists(path):
        tmp = path + ".part"
        Image.fromarray(image).save(tmp, format="PNG")
        os.replace(tmp, path)
    return path


def _temp_dir() -> str:
    global _texture_dir
    if _texture_dir is None:
        _texture_dir = tempfile.mkdtemp(prefix="gradleak_textures_")
        atexit.register(shutil.rmtree, _texture_dir, True)
    return _texture_dir


def texture_image(spec: Texture) -> np.ndarray:
    """The (H, W, 3) uint8 image of a procedural texture; a pure function of ``spec``."""
    n = _TEXTURE_PIXELS
    rng = np.random.default_rng([spec.seed, len(spec.kind)])
    if spec.kind == "palette":
        img = np.zeros((n, _PALETTE_SIZE, 3), dtype=np.float64)
        for k, colour in enumerate(spec.colours):
            img[:, k] = colour
        return img.astype(np.uint8)
    c1 = np.asarray(spec.colours[0], dtype=np.float64)
    c2 = np.asarray(spec.colours[1] if len(spec.colours) > 1 else spec.colours[0], dtype=np.float64)
    yy, xx = np.mgrid[0:n, 0:n]
    if spec.kind == "planks":
        boards = 4
        shade = rng.uniform(0.75, 1.1, size=boards)[yy * boards // n]
        grain = 0.06 * np.sin(xx * rng.uniform(0.3, 0.8) + yy)
        img = c1 * (shade + grain)[..., None]
        img[(yy % (n // boards)) == 0] *= 0.55
    elif spec.kind == "tiles":
        checker = ((xx * 4 // n) + (yy * 4 // n)) % 2 == 0
        img = np.where(checker[..., None], c1, 0.5 * (c1 + c2))
        img[(xx % (n // 4) == 0) | (yy % (n // 4) == 0)] = 0.35 * c1 + 140
    elif spec.kind == "carpet":
        img = c1 * rng.uniform(0.8, 1.05, size=(n, n, 1))
    elif spec.kind == "stripes":
        width = int(rng.integers(8, 17))
        img = np.where(((xx // width) % 2 == 0)[..., None], c1, 0.8 * c1 + 0.2 * c2)
    elif spec.kind == "dots":
        img = np.where((((xx % 16) - 8) ** 2 + ((yy % 16) - 8) ** 2 < 6)[..., None], 0.6 * c1 + 0.4 * c2, c1)
    else:
        img = np.tile(c1, (n, n, 1))
    return np.clip(img, 0, 255).astype(np.uint8)
