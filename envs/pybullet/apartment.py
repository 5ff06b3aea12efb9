"""Deterministic procedural apartments for the PyBullet household tasks.

``generate_apartment(layout_id)`` is a pure function of the layout id: it draws only from a
``numpy.random.Generator`` seeded from the id, so the same id gives the same apartment in any process on
any machine. The result is plain data (rooms, wall and furniture boxes, props, textures, a free-space grid);
``scene.py`` turns it into PyBullet bodies.

Coordinates: metres, x east, y north, z up; the apartment's outer south-west corner is the origin. Room
boundaries lie on grid lines; every room owns a 5 cm wall slab on the inner side of each boundary, so a
shared wall is two slabs back to back (10 cm) and each side can carry its own room's colour.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import ndimage

WALL_HEIGHT = 2.5
WALL_HALF_THICKNESS = 0.025  # each room's slab; two slabs make a 10 cm wall
DOOR_WIDTH = 1.0
DOOR_HEIGHT = 2.05
CELL = 0.1
ROBOT_RADIUS = 0.18
ROBOT_HEIGHT = 1.2
# Extra clearance on top of the robot radius so that a cell-centre start pose never touches an obstacle
# whose edge falls between cell centres.
CLEARANCE_MARGIN = 0.08
_SEED_SALT = 0x6772_6C6B  # "grlk": keeps layout seeds apart from any other use of small integers

Rgb = tuple[int, int, int]

# Muted interior colours; walls are drawn light, floors darker, so that the two rarely coincide.
WALL_COLOURS: tuple[Rgb, ...] = (
    (235, 228, 210), (214, 226, 236), (238, 214, 200), (208, 230, 208), (230, 230, 230), (244, 226, 160),
    (200, 210, 240), (240, 200, 215), (205, 235, 225), (225, 215, 240), (250, 240, 225), (190, 220, 200),
    (236, 196, 160), (180, 205, 225), (220, 200, 180), (245, 245, 210),
)
FLOOR_COLOURS: tuple[Rgb, ...] = (
    (150, 110, 70), (120, 85, 55), (170, 140, 100), (110, 110, 115), (90, 100, 120), (160, 150, 140),
    (130, 70, 60), (80, 110, 90), (185, 165, 130), (100, 80, 90), (140, 120, 90), (70, 75, 85),
)
WOOD_COLOURS: tuple[Rgb, ...] = ((120, 80, 45), (160, 115, 70), (90, 60, 40), (190, 160, 120), (60, 45, 35))
FABRIC_COLOURS: tuple[Rgb, ...] = (
    (60, 90, 150), (150, 50, 50), (70, 120, 80), (200, 170, 90), (90, 90, 95), (130, 80, 140), (40, 130, 140),
)
LIGHT_COLOURS: tuple[Rgb, ...] = ((240, 240, 235), (225, 230, 240), (245, 230, 215))
# Shipped pybullet_data images usable as tiling textures (path relative to pybullet_data).
DATA_TEXTURES: tuple[str, ...] = ("checker_blue.png", "table/table.png")
PROCEDURAL_FLOOR_KINDS: tuple[str, ...] = ("planks", "tiles", "carpet")
PROCEDURAL_WALL_KINDS: tuple[str, ...] = ("stripes", "plain", "dots", "plain")
ROOM_KINDS: tuple[str, ...] = ("living", "bedroom", "kitchen", "office", "hall")


@dataclass(frozen=True)
class Texture:
    """A tiling texture: a ``pybullet_data`` image or a small procedural image made from ``seed``.

    Attributes:
        kind: ``"file"`` or a procedural kind (``planks``, ``tiles``, ``carpet``, ``stripes``, ``dots``,
            ``plain``).
        name: Path relative to ``pybullet_data`` for ``"file"``, else empty.
        colours: Base colours of a procedural texture.
        seed: Seed of a procedural texture's own generator.
        tile_m: World metres covered by one repeat of the image.
    """

    kind: str
    name: str = ""
    colours: tuple[Rgb, ...] = ()
    seed: int = 0
    tile_m: float = 1.0


@dataclass(frozen=True)
class Box:
    """An axis-aligned box; ``faces`` lists the faces worth drawing (e.g. ``"+x"``), the rest are hidden."""

    center: tuple[float, float, float]
    half: tuple[float, float, float]
    colour: Rgb
    faces: tuple[str, ...] = ("+x", "-x", "+y", "-y", "+z")


@dataclass(frozen=True)
class PropType:
    """A ``pybullet_data`` object: URDF path, scale to household size, footprint radius once scaled."""

    name: str
    urdf: str
    scale: float
    radius: float


@dataclass(frozen=True)
class Prop:
    """A placed prop; ``z`` is the height of the surface it stands on (``scene.py`` rests it there)."""

    kind: PropType
    x: float
    y: float
    z: float
    yaw: float
    room: int


@dataclass(frozen=True)
class Door:
    """A doorway between rooms ``a`` and ``b`` on the grid line ``axis = coord`` centred at ``along``."""

    a: int
    b: int
    axis: str  # "x": the wall is the line x = coord; "y": the line y = coord
    coord: float
    along: float


@dataclass(frozen=True)
class Room:
    """One room: grid cell, inner rectangle (inside its wall slabs), kind, looks and static geometry."""

    index: int
    row: int
    col: int
    kind: str
    inner: tuple[float, float, float, float]  # x0, y0, x1, y1
    floor: Texture
    wall: Texture
    walls: tuple[Box, ...]
    furniture: tuple[Box, ...]
    thresholds: tuple[tuple[float, float, float, float], ...]  # floor strips inside doorways


# Targets of ActivePerception (one per episode, so a few thousand triangles are affordable).
TARGET_TYPES: tuple[PropType, ...] = (
    PropType("duck", "duck_vhacd.urdf", 4.0, 0.22),
    PropType("teddy", "teddy_vhacd.urdf", 4.0, 0.25),
    PropType("soccerball", "soccerball.urdf", 0.32, 0.17),
    PropType("mug", "objects/mug.urdf", 2.5, 0.15),
    PropType("sphere", "sphere2.urdf", 0.3, 0.16),
    PropType("tray", "tray/traybox.urdf", 0.6, 0.26),
    PropType("lego", "lego/lego.urdf", 8.0, 0.2),
)
# Decor stays low-poly: TinyRenderer transforms every triangle of every drawn body each frame.
PROP_TYPES: tuple[PropType, ...] = (
    PropType("mug", "objects/mug.urdf", 2.0, 0.12),
    PropType("sphere", "sphere2.urdf", 0.25, 0.14),
    PropType("tray", "tray/traybox.urdf", 0.6, 0.26),
    PropType("cube", "cube_small.urdf", 5.0, 0.18),
    PropType("jenga", "jenga/jenga.urdf", 3.0, 0.24),
    PropType("domino", "domino/domino.urdf", 4.0, 0.2),
)
TABLE_PROP = PropType("table", "table/table.urdf", 1.0, 0.9)


@dataclass(frozen=True, eq=False)
class Apartment:
    """A generated apartment. Read-only; build it into PyBullet with :func:`scene.build_scene`.

    Attributes:
        layout_id: The layout id it was generated from.
        xs: Grid lines in x (``cols + 1`` values, metres).
        ys: Grid lines in y (``rows + 1`` values, metres).
        rooms: Rooms in row-major order; ``rooms[i].index == i``.
        doors: Doorways; together they connect every room.
        props: Props from ``pybullet_data``, including full-size tables.
        free: Boolean grid (``ny, nx``) of cells where the robot's centre may stand: clear of every obstacle
            by the robot radius plus a margin, and all in one connected component.
        visible: For each room, the rooms that can be seen from inside it (itself included), found by
            casting rays through the doorways; the renderer skips the rest.
        cell: Grid cell size in metres.
    """

    layout_id: int
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    rooms: tuple[Room, ...]
    doors: tuple[Door, ...]
    props: tuple[Prop, ...]
    free: np.ndarray = field(repr=False)
    visible: tuple[tuple[int, ...], ...] = ()
    cell: float = CELL

    @property
    def size(self) -> tuple[float, float]:
        """Outer extent (width, depth) in metres."""
        return self.xs[-1], self.ys[-1]

    def room_of(self, x: float, y: float) -> int:
        """Index of the room whose grid cell holds (x, y), or -1 outside the apartment."""
        if not (0.0 <= x < self.xs[-1] and 0.0 <= y < self.ys[-1]):
            return -1
        col = int(np.searchsorted(self.xs, x, side="right")) - 1
        row = int(np.searchsorted(self.ys, y, side="right")) - 1
        return row * (len(self.xs) - 1) + col

    def is_free(self, x: float, y: float) -> bool:
        """Whether the robot centre may stand at (x, y) according to the free-space grid."""
        i, j = int(np.floor(y / self.cell)), int(np.floor(x / self.cell))
        return 0 <= i < self.free.shape[0] and 0 <= j < self.free.shape[1] and bool(self.free[i, j])

    def free_points(self) -> np.ndarray:
        """Centres (N, 2) of the free cells, in a fixed row-major order."""
        rows, cols = np.nonzero(self.free)
        return np.stack([(cols + 0.5) * self.cell, (rows + 0.5) * self.cell], axis=1)

    def rooms_in_view(self, x: float, y: float, yaw: float, half_angle: float = math.radians(70)) -> tuple[int, ...]:
        """Rooms a camera at (x, y) looking along ``yaw`` may see: the rooms it stands in, plus, for each of
        their doorways inside the (generously widened) horizontal view wedge, what is visible through it."""
        near = self.rooms_near(x, y)
        shown = set(near)
        for a in near:
            for d in self.doors:
                if a not in (d.a, d.b) or not _door_in_wedge(d, x, y, yaw, half_angle):
                    continue
                b = d.b if d.a == a else d.a
                shown.add(b)
                shown.update(set(self.visible[b]) & set(self.visible[a]))
        return tuple(sorted(shown))

    def rooms_near(self, x: float, y: float, reach: float = 0.4) -> tuple[int, ...]:
        """Rooms whose inner rectangle, grown by ``reach`` metres, holds (x, y)."""
        out = []
        for room in self.rooms:
            x0, y0, x1, y1 = room.inner
            if x0 - reach <= x <= x1 + reach and y0 - reach <= y <= y1 + reach:
                out.append(room.index)
        return tuple(out)

    def neighbours(self, room: int) -> tuple[int, ...]:
        """Rooms that share a doorway with ``room``, ascending."""
        out = {d.b for d in self.doors if d.a == room} | {d.a for d in self.doors if d.b == room}
        return tuple(sorted(out))


def _door_in_wedge(d: Door, x: float, y: float, yaw: float, half_angle: float) -> bool:
    lo, hi = d.along - DOOR_WIDTH / 2, d.along + DOOR_WIDTH / 2
    ends = ((d.coord, lo), (d.coord, hi)) if d.axis == "x" else ((lo, d.coord), (hi, d.coord))
    if min(math.hypot(ex - x, ey - y) for ex, ey in ends) < 0.6:
        return True
    angles = [(math.atan2(ey - y, ex - x) - yaw + math.pi) % (2 * math.pi) - math.pi for ex, ey in ends]
    if any(abs(a) <= half_angle for a in angles):
        return True
    a1, a2 = sorted(angles)
    # Both ends outside the wedge: the doorway still crosses it if it spans the forward direction.
    return a2 - a1 < math.pi and a1 < 0 < a2


def layout_rng(layout_id: int) -> np.random.Generator:
    """The generator every random choice of ``layout_id`` comes from."""
    return np.random.default_rng([_SEED_SALT, int(layout_id)])


@lru_cache(maxsize=32)
def generate_apartment(layout_id: int) -> Apartment:
    """Generate the apartment of ``layout_id`` (pure and cached; callers must not mutate the result).

    Args:
        layout_id: Non-negative layout id; range checks against the split manifest are the caller's job.

    Returns:
        The apartment.
    """
    rng = layout_rng(layout_id)
    rows, cols = [(2, 2), (2, 3), (3, 2)][int(rng.integers(3))]
    xs = _grid_lines(rng, cols)
    ys = _grid_lines(rng, rows)
    doors = _doors(rng, rows, cols, xs, ys)
    kinds = _room_kinds(rng, rows * cols)
    shells = [_room_shell(rng, i, rows, cols, xs, ys, kinds[i], doors) for i in range(rows * cols)]
    occupied = _rasterise(xs, ys, [b for s in shells for b in s.walls])
    rooms, props = [], []
    for shell in shells:
        room, room_props, occupied = _furnish(rng, shell, doors, xs, ys, occupied)
        rooms.append(room)
        props.extend(room_props)
    free = _largest_component(_inflate(occupied))
    free.flags.writeable = False
    walls = _rasterise(xs, ys, [b for s in shells for b in s.walls])
    visible = _visibility(layout_rng(layout_id + 1_000_003), rooms, doors, walls)
    return Apartment(layout_id, xs, ys, tuple(rooms), doors, tuple(props), free, visible)


def _visibility(rng: np.random.Generator, rooms, doors, walls: np.ndarray, n_rays: int = 800):
    """Conservative room-to-room visibility: a room sees another if any sampled segment between them
    crosses no wall cell. Direct neighbours always count, so a miss can only hide rooms two doors away."""
    n = len(rooms)
    seen = [{i} for i in range(n)]
    for d in doors:
        seen[d.a].add(d.b)
        seen[d.b].add(d.a)
    steps = np.linspace(0.0, 1.0, 160)[None, :, None]
    for a in range(n):
        for b in range(a + 1, n):
            if b in seen[a]:
                continue
            pa, pb = _sample_in(rng, rooms[a].inner, n_rays), _sample_in(rng, rooms[b].inner, n_rays)
            pts = pa[:, None, :] + (pb - pa)[:, None, :] * steps
            i = np.clip((pts[..., 1] / CELL).astype(int), 0, walls.shape[0] - 1)
            j = np.clip((pts[..., 0] / CELL).astype(int), 0, walls.shape[1] - 1)
            if (~walls[i, j].any(axis=1)).any():
                seen[a].add(b)
                seen[b].add(a)
    return tuple(tuple(sorted(s)) for s in seen)


def _sample_in(rng: np.random.Generator, rect, n: int) -> np.ndarray:
    x0, y0, x1, y1 = rect
    return np.stack([rng.uniform(x0, x1, n), rng.uniform(y0, y1, n)], axis=1)


def _grid_lines(rng: np.random.Generator, n: int) -> tuple[float, ...]:
    sizes = np.round(rng.uniform(2.6, 4.5, size=n), 1)
    return tuple(float(v) for v in np.round(np.concatenate([[0.0], np.cumsum(sizes)]), 1))


def _doors(rng: np.random.Generator, rows: int, cols: int, xs, ys) -> tuple[Door, ...]:
    """A random spanning tree of the room grid plus a few extra doorways (loops make maps less linear)."""
    edges = [(r * cols + c, r * cols + c + 1) for r in range(rows) for c in range(cols - 1)]
    edges += [(r * cols + c, (r + 1) * cols + c) for r in range(rows - 1) for c in range(cols)]
    order = rng.permutation(len(edges))
    parent = list(range(rows * cols))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    chosen = []
    for k in order:
        a, b = edges[int(k)]
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
            chosen.append((a, b))
        elif rng.random() < 0.3:
            chosen.append((a, b))
    doors = [_door_on(rng, a, b, cols, xs, ys) for a, b in sorted(chosen)]
    return tuple(doors)


def _door_on(rng: np.random.Generator, a: int, b: int, cols: int, xs, ys) -> Door:
    ra, ca = divmod(a, cols)
    margin = 0.35 + DOOR_WIDTH / 2
    if b == a + 1:  # east neighbour: wall is the line x = xs[ca + 1]
        lo, hi = ys[ra] + margin, ys[ra + 1] - margin
        return Door(a, b, "x", xs[ca + 1], round(float(rng.uniform(lo, hi)), 2))
    lo, hi = xs[ca] + margin, xs[ca + 1] - margin
    return Door(a, b, "y", ys[ra + 1], round(float(rng.uniform(lo, hi)), 2))


def _room_kinds(rng: np.random.Generator, n: int) -> list[str]:
    """Every apartment has a living room, a bedroom and a kitchen; the rest are drawn."""
    base = ["living", "bedroom", "kitchen"] + [ROOM_KINDS[int(i)] for i in rng.integers(len(ROOM_KINDS), size=n - 3)]
    return [base[int(i)] for i in rng.permutation(n)]


@dataclass
class _Shell:
    index: int
    row: int
    col: int
    kind: str
    inner: tuple[float, float, float, float]
    walls: list[Box]
    openings: dict[str, list[tuple[float, float]]]  # side -> door intervals along it
    thresholds: list[tuple[float, float, float, float]]
    floor: Texture
    wall: Texture


def _room_shell(rng, index, rows, cols, xs, ys, kind, doors) -> _Shell:
    row, col = divmod(index, cols)
    x0, x1, y0, y1 = xs[col], xs[col + 1], ys[row], ys[row + 1]
    t = 2 * WALL_HALF_THICKNESS
    inner = (x0 + t, y0 + t, x1 - t, y1 - t)
    openings: dict[str, list[tuple[float, float]]] = {"S": [], "N": [], "W": [], "E": []}
    thresholds = []
    for d in doors:
        if index not in (d.a, d.b):
            continue
        span = (d.along - DOOR_WIDTH / 2, d.along + DOOR_WIDTH / 2)
        if d.axis == "x":
            openings["E" if d.a == index else "W"].append(span)
            if d.a == index:
                thresholds.append((x1 - t, span[0], x1 + t, span[1]))
        else:
            openings["N" if d.a == index else "S"].append(span)
            if d.a == index:
                thresholds.append((span[0], y1 - t, span[1], y1 + t))
    wall_colour = WALL_COLOURS[int(rng.integers(len(WALL_COLOURS)))]
    walls = _walls(inner, (x0, y0, x1, y1), openings, wall_colour)
    return _Shell(index, row, col, kind, inner, walls, openings, thresholds,
                  _floor_texture(rng), _wall_texture(rng, wall_colour))


def _floor_texture(rng: np.random.Generator) -> Texture:
    if rng.random() < 0.3:
        name = DATA_TEXTURES[int(rng.integers(len(DATA_TEXTURES)))]
        return Texture("file", name=name, tile_m=float(rng.choice([0.8, 1.2, 2.0])))
    kind = PROCEDURAL_FLOOR_KINDS[int(rng.integers(len(PROCEDURAL_FLOOR_KINDS)))]
    c1 = FLOOR_COLOURS[int(rng.integers(len(FLOOR_COLOURS)))]
    c2 = FLOOR_COLOURS[int(rng.integers(len(FLOOR_COLOURS)))]
    return Texture(kind, colours=(c1, c2), seed=int(rng.integers(2**31)), tile_m=float(rng.choice([1.0, 1.6, 2.4])))


def _wall_texture(rng: np.random.Generator, colour: Rgb) -> Texture:
    kind = PROCEDURAL_WALL_KINDS[int(rng.integers(len(PROCEDURAL_WALL_KINDS)))]
    accent = WALL_COLOURS[int(rng.integers(len(WALL_COLOURS)))]
    return Texture(kind, colours=(colour, accent), seed=int(rng.integers(2**31)), tile_m=float(rng.choice([1.0, 1.5])))


def _walls(inner, outer, openings, colour) -> list[Box]:
    """Slabs along the four sides, cut at doorways, plus lintels over the doorways.

    South/north slabs span the full outer width so that corners close; west/east slabs fit between them.
    """
    ix0, iy0, ix1, iy1 = inner
    x0, y0, x1, y1 = outer
    boxes: list[Box] = []
    sides = {
        "S": ("x", (x0, x1), (y0 + WALL_HALF_THICKNESS), "+y"),
        "N": ("x", (x0, x1), (y1 - WALL_HALF_THICKNESS), "-y"),
        "W": ("y", (iy0, iy1), (x0 + WALL_HALF_THICKNESS), "+x"),
        "E": ("y", (iy0, iy1), (x1 - WALL_HALF_THICKNESS), "-x"),
    }
    for side in ("S", "N", "W", "E"):
        axis, (lo, hi), c, inward = sides[side]
        cuts = sorted(openings[side])
        start = lo
        for a, b in cuts + [(hi, hi)]:
            jambs = tuple(f for f, flag in (("-" + axis, start != lo), ("+" + axis, a != hi)) if flag)
            if a - start > 1e-6:
                boxes.append(_slab(axis, start, a, c, 0.0, WALL_HEIGHT, colour, (inward,) + jambs))
            if b > a:
                boxes.append(_slab(axis, a, b, c, DOOR_HEIGHT, WALL_HEIGHT, colour, (inward, "-z")))
            start = b
    return boxes


def _slab(axis, a, b, c, z0, z1, colour, faces) -> Box:
    mid, half = (a + b) / 2, (b - a) / 2
    zc, zh = (z0 + z1) / 2, (z1 - z0) / 2
    if axis == "x":
        return Box((mid, c, zc), (half, WALL_HALF_THICKNESS, zh), colour, faces)
    return Box((c, mid, zc), (WALL_HALF_THICKNESS, half, zh), colour, faces)


# ---------------------------------------------------------------- furniture
# Templates in a wall-local frame: u along the wall (centred), v away from the wall, z up. Each part is
# (u_centre, v_centre, z_centre, u_half, v_half, z_half, colour role). Roles pick per-room colours.
_TEMPLATES: dict[str, tuple[tuple[float, float], tuple[tuple, ...], tuple[float, ...]]] = {
    # name: ((width, depth), parts, surface heights that can carry props)
    "bed": ((1.5, 2.0), (
        (0, 1.0, 0.18, 0.75, 1.0, 0.18, "wood"), (0, 1.02, 0.44, 0.72, 0.96, 0.08, "light"),
        (0, 0.3, 0.56, 0.55, 0.16, 0.06, "light"), (0, 0.04, 0.5, 0.75, 0.04, 0.5, "wood"),
        (0, 1.35, 0.53, 0.73, 0.62, 0.02, "fabric")), ()),
    "nightstand": ((0.5, 0.42), ((0, 0.21, 0.27, 0.25, 0.21, 0.27, "wood"),), (0.54,)),
    "sofa": ((2.0, 0.9), (
        (0, 0.45, 0.22, 1.0, 0.45, 0.22, "fabric"), (0, 0.1, 0.6, 1.0, 0.1, 0.36, "fabric"),
        (-0.91, 0.45, 0.45, 0.09, 0.45, 0.2, "fabric"), (0.91, 0.45, 0.45, 0.09, 0.45, 0.2, "fabric")), ()),
    "shelf": ((1.0, 0.36), (
        (0, 0.18, 0.9, 0.5, 0.18, 0.9, "wood"), (-0.22, 0.36, 0.55, 0.18, 0.02, 0.15, "fabric"),
        (0.2, 0.36, 1.15, 0.22, 0.02, 0.14, "light"), (0.0, 0.36, 1.6, 0.3, 0.02, 0.12, "fabric")), (1.8,)),
    "counter": ((2.2, 0.62), (
        (0, 0.3, 0.44, 1.1, 0.3, 0.44, "light"), (0, 0.31, 0.9, 1.1, 0.31, 0.02, "wood"),
        (0, 0.02, 1.45, 1.1, 0.02, 0.35, "light")), (0.92,)),
    "desk": ((1.3, 0.65), (
        (0, 0.33, 0.74, 0.65, 0.33, 0.02, "wood"), (-0.6, 0.33, 0.36, 0.04, 0.31, 0.36, "wood"),
        (0.6, 0.33, 0.36, 0.04, 0.31, 0.36, "wood")), (0.76,)),
    "tv": ((1.3, 0.45), (
        (0, 0.22, 0.25, 0.65, 0.22, 0.25, "wood"), (0, 0.2, 0.85, 0.55, 0.03, 0.33, "dark")), ()),
    "wardrobe": ((1.1, 0.6), ((0, 0.3, 1.0, 0.55, 0.3, 1.0, "wood"), (0, 0.61, 1.0, 0.01, 0.01, 0.9, "dark")), ()),
    "armchair": ((0.85, 0.85), (
        (0, 0.42, 0.22, 0.42, 0.42, 0.22, "fabric"), (0, 0.09, 0.6, 0.42, 0.09, 0.3, "fabric")), ()),
}
_CENTRE_TEMPLATES: dict[str, tuple[tuple[float, float], tuple[tuple, ...], tuple[float, ...]]] = {
    "table": ((1.2, 0.8), (
        (0, 0, 0.74, 0.6, 0.4, 0.02, "wood"), (-0.54, -0.34, 0.36, 0.03, 0.03, 0.36, "wood"),
        (0.54, -0.34, 0.36, 0.03, 0.03, 0.36, "wood"), (-0.54, 0.34, 0.36, 0.03, 0.03, 0.36, "wood"),
        (0.54, 0.34, 0.36, 0.03, 0.03, 0.36, "wood")), (0.76,)),
    "coffee": ((1.0, 0.55), ((0, 0, 0.2, 0.5, 0.27, 0.2, "wood"),), (0.4,)),
}
_ROOM_FURNITURE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # kind: (wall items in priority order, centre items)
    "living": (("sofa", "tv", "shelf", "armchair"), ("coffee",)),
    "bedroom": (("bed", "wardrobe", "nightstand", "desk"), ()),
    "kitchen": (("counter", "shelf", "counter"), ("table", "urdf_table")),
    "office": (("desk", "shelf", "shelf", "armchair"), ()),
    "hall": (("shelf", "wardrobe"), ()),
}
_DOOR_ZONE_DEPTH = 1.1
_GAP = 0.15


def _furnish(rng, shell: _Shell, doors, xs, ys, occupied):
    """Place furniture and props in one room; every placement must keep all free space connected."""
    colours = {
        "wood": WOOD_COLOURS[int(rng.integers(len(WOOD_COLOURS)))],
        "fabric": FABRIC_COLOURS[int(rng.integers(len(FABRIC_COLOURS)))],
        "light": LIGHT_COLOURS[int(rng.integers(len(LIGHT_COLOURS)))],
        "dark": (35, 35, 40),
    }
    taken = _door_zones(shell)
    boxes: list[Box] = []
    surfaces: list[tuple[float, float, float, float, float]] = []  # x0, y0, x1, y1, z
    props: list[Prop] = []
    wall_items, centre_items = _ROOM_FURNITURE[shell.kind]
    for name in wall_items:
        if rng.random() < 0.15:
            continue
        placed = _place_wall_item(rng, shell, name, taken, colours, xs, ys, occupied)
        if placed is not None:
            rect, parts, tops, occupied = placed
            taken.append(rect)
            boxes.extend(parts)
            surfaces.extend((*rect, z) for z in tops)
    for name in centre_items:
        placed = _place_centre_item(rng, shell, name, taken, colours, xs, ys, occupied)
        if placed is None:
            continue
        rect, parts, tops, occupied, prop = placed
        taken.append(rect)
        boxes.extend(parts)
        surfaces.extend((*rect, z) for z in tops)
        if prop is not None:
            props.append(prop)
            surfaces.append((*rect, 0.63))
        break  # one centre item keeps the middle of the room passable
    props.extend(_place_props(rng, shell, surfaces))
    floor_props, occupied = _place_floor_props(rng, shell, taken, xs, ys, occupied)
    props.extend(floor_props)
    room = Room(shell.index, shell.row, shell.col, shell.kind, shell.inner, shell.floor, shell.wall,
                tuple(shell.walls), tuple(boxes), tuple(shell.thresholds))
    return room, props, occupied


def _door_zones(shell: _Shell) -> list[tuple[float, float, float, float]]:
    ix0, iy0, ix1, iy1 = shell.inner
    d, pad = _DOOR_ZONE_DEPTH, 0.25
    zones = []
    for side, spans in shell.openings.items():
        for a, b in spans:
            zones.append({
                "S": (a - pad, iy0, b + pad, iy0 + d), "N": (a - pad, iy1 - d, b + pad, iy1),
                "W": (ix0, a - pad, ix0 + d, b + pad), "E": (ix1 - d, a - pad, ix1, b + pad),
            }[side])
    return zones


def _overlaps(r, others, gap: float) -> bool:
    return any(r[0] < o[2] + gap and o[0] < r[2] + gap and r[1] < o[3] + gap and o[1] < r[3] + gap for o in others)


def _place_wall_item(rng, shell, name, taken, colours, xs, ys, occupied):
    (width, depth), parts, tops = _TEMPLATES[name]
    ix0, iy0, ix1, iy1 = shell.inner
    for _ in range(12):
        side = "SNWE"[int(rng.integers(4))]
        length = (ix1 - ix0) if side in "SN" else (iy1 - iy0)
        if length < width + 0.1:
            continue
        u = float(rng.uniform(width / 2 + 0.02, length - width / 2 - 0.02))
        boxes = [_wall_part(side, shell.inner, u, p, colours) for p in parts]
        rect = _footprint(boxes)
        if _overlaps(rect, taken, _GAP) or not _inside(rect, shell.inner):
            continue
        trial = _rasterise(xs, ys, boxes, occupied)
        if _connected(trial, shell):
            return rect, boxes, tops, trial
    return None


def _wall_part(side, inner, u, part, colours) -> Box:
    """Map a template part from the wall frame of ``side`` (u from the side's start) to the world."""
    pu, pv, pz, hu, hv, hz, role = part
    ix0, iy0, ix1, iy1 = inner
    if side == "S":
        c, h = (ix0 + u + pu, iy0 + pv), (hu, hv)
    elif side == "N":
        c, h = (ix0 + u - pu, iy1 - pv), (hu, hv)
    elif side == "W":
        c, h = (ix0 + pv, iy0 + u - pu), (hv, hu)
    else:
        c, h = (ix1 - pv, iy0 + u + pu), (hv, hu)
    return Box((round(c[0], 4), round(c[1], 4), pz), (h[0], h[1], hz), colours[role])


def _footprint(boxes) -> tuple[float, float, float, float]:
    return (min(b.center[0] - b.half[0] for b in boxes), min(b.center[1] - b.half[1] for b in boxes),
            max(b.center[0] + b.half[0] for b in boxes), max(b.center[1] + b.half[1] for b in boxes))


def _inside(r, inner) -> bool:
    return r[0] >= inner[0] - 1e-6 and r[1] >= inner[1] - 1e-6 and r[2] <= inner[2] + 1e-6 and r[3] <= inner[3] + 1e-6


def _place_centre_item(rng, shell, name, taken, colours, xs, ys, occupied):
    ix0, iy0, ix1, iy1 = shell.inner
    cx, cy = (ix0 + ix1) / 2 + rng.uniform(-0.3, 0.3), (iy0 + iy1) / 2 + rng.uniform(-0.3, 0.3)
    if name == "urdf_table":
        # pybullet_data's table: 1.5 x 1.0 m top at 0.63 m; its legs have no collision, the top does.
        rect = (cx - 0.75, cy - 0.5, cx + 0.75, cy + 0.5)
        boxes = [Box((cx, cy, 0.6), (0.75, 0.5, 0.03), colours["wood"], ())]  # collision/occupancy only
        prop = Prop(TABLE_PROP, round(float(cx), 3), round(float(cy), 3), 0.0, 0.0, shell.index)
    else:
        (w, d), parts, tops = _CENTRE_TEMPLATES[name]
        boxes = [Box((round(cx + p[0], 4), round(cy + p[1], 4), p[2]), p[3:6], colours[p[6]]) for p in parts]
        rect, prop = _footprint(boxes), None
        tops_out = tops
    if _overlaps(rect, taken, 0.85) or not _inside(rect, shell.inner):
        return None
    trial = _rasterise(xs, ys, boxes, occupied)
    if not _connected(trial, shell):
        return None
    if prop is not None:
        return rect, boxes, (), trial, prop
    return rect, boxes, tops_out, trial, None


def _place_props(rng, shell, surfaces) -> list[Prop]:
    props = []
    for x0, y0, x1, y1, z in surfaces:
        if rng.random() < 0.45:
            continue
        kind = PROP_TYPES[int(rng.integers(len(PROP_TYPES)))]
        margin = min(kind.radius * 0.6, (x1 - x0) / 2 - 0.01, (y1 - y0) / 2 - 0.01)
        x = float(rng.uniform(x0 + margin, x1 - margin))
        y = float(rng.uniform(y0 + margin, y1 - margin))
        props.append(Prop(kind, round(x, 3), round(y, 3), z, round(float(rng.uniform(-np.pi, np.pi)), 3), shell.index))
    return props


def _place_floor_props(rng, shell, taken, xs, ys, occupied):
    props = []
    ix0, iy0, ix1, iy1 = shell.inner
    for _ in range(int(rng.integers(0, 2))):
        kind = PROP_TYPES[int(rng.integers(len(PROP_TYPES)))]
        r = kind.radius
        x = float(rng.uniform(ix0 + r, ix1 - r))
        y = float(rng.uniform(iy0 + r, iy1 - r))
        rect = (x - r, y - r, x + r, y + r)
        if _overlaps(rect, taken, 0.1):
            continue
        box = Box((x, y, 0.2), (r * 0.8, r * 0.8, 0.2), (0, 0, 0), ())
        trial = _rasterise(xs, ys, [box], occupied)
        if _connected(trial, shell):
            occupied = trial
            taken.append(rect)
            props.append(Prop(kind, round(x, 3), round(y, 3), 0.0, round(float(rng.uniform(-np.pi, np.pi)), 3),
                              shell.index))
    return props, occupied


# ---------------------------------------------------------------- free-space grid
def _grid_shape(xs, ys) -> tuple[int, int]:
    return int(np.ceil(ys[-1] / CELL - 1e-9)), int(np.ceil(xs[-1] / CELL - 1e-9))


def _rasterise(xs, ys, boxes, base: np.ndarray | None = None) -> np.ndarray:
    """Mark cells whose centre lies in a box's footprint (plus half a cell, so thin walls always show)."""
    occ = np.zeros(_grid_shape(xs, ys), dtype=bool) if base is None else base.copy()
    for b in boxes:
        if b.center[2] - b.half[2] > ROBOT_HEIGHT:  # lintels and the like pass over the robot
            continue
        x0, x1 = b.center[0] - b.half[0] - CELL / 2, b.center[0] + b.half[0] + CELL / 2
        y0, y1 = b.center[1] - b.half[1] - CELL / 2, b.center[1] + b.half[1] + CELL / 2
        j0, j1 = int(np.ceil(x0 / CELL - 0.5)), int(np.floor(x1 / CELL - 0.5))
        i0, i1 = int(np.ceil(y0 / CELL - 0.5)), int(np.floor(y1 / CELL - 0.5))
        occ[max(i0, 0):max(i1 + 1, 0), max(j0, 0):max(j1 + 1, 0)] = True
    return occ


def _inflate(occupied: np.ndarray) -> np.ndarray:
    padded = np.pad(occupied, 1, constant_values=True)  # outside the apartment is an obstacle
    dist = ndimage.distance_transform_edt(~padded)[1:-1, 1:-1] * CELL
    return dist > ROBOT_RADIUS + CLEARANCE_MARGIN


def _largest_component(free: np.ndarray) -> np.ndarray:
    labels, n = ndimage.label(free)
    if n == 0:
        return free
    counts = np.bincount(labels.ravel())
    counts[0] = 0
    return labels == int(np.argmax(counts))


def _connected(occupied: np.ndarray, shell: _Shell) -> bool:
    """Whether the free space stays one piece that still reaches this room's doorways and centre area."""
    free = _inflate(occupied)
    labels, n = ndimage.label(free)
    if n != 1:
        return False
    ix0, iy0, ix1, iy1 = shell.inner
    i0, i1 = int(iy0 / CELL), int(iy1 / CELL)
    j0, j1 = int(ix0 / CELL), int(ix1 / CELL)
    # A room must keep a sizeable free area, not just a corridor to its door.
    return int(free[i0:i1, j0:j1].sum()) >= 0.3 * (i1 - i0) * (j1 - j0)


# ---------------------------------------------------------------- landmarks (read-only views for scoring)


def doorway_centres(apartment: Apartment) -> np.ndarray:
    """Centres (N, 2) of the doorways on the floor, in ``apartment.doors`` order.

    Example:
        >>> doorway_centres(generate_apartment(0)).shape[1]
        2
    """
    pts = [(d.coord, d.along) if d.axis == "x" else (d.along, d.coord) for d in apartment.doors]
    return np.asarray(pts, dtype=np.float64).reshape(-1, 2)


def furniture_footprints(apartment: Apartment, touch: float = 0.02) -> np.ndarray:
    """Floor footprints (M, 4) as (x0, y0, x1, y1) of the furniture pieces, one per piece: the boxes of a
    room's furniture whose footprints overlap or touch (within ``touch`` metres) are merged, so a bed with
    its mattress and pillows is one piece. Walls and decor props are not furniture.
    """
    out = []
    for room in apartment.rooms:
        rects = [(b.center[0] - b.half[0], b.center[1] - b.half[1], b.center[0] + b.half[0],
                  b.center[1] + b.half[1]) for b in room.furniture]
        groups = [[r] for r in rects]
        merged = True
        while merged:
            merged = False
            for i in range(len(groups)):
                for j in range(i + 1, len(groups)):
                    a, b = _footprint_of(groups[i]), _footprint_of(groups[j])
                    if a[0] <= b[2] + touch and b[0] <= a[2] + touch and a[1] <= b[3] + touch and b[1] <= a[3] + touch:
                        groups[i] += groups.pop(j)
                        merged = True
                        break
                if merged:
                    break
        out.extend(_footprint_of(g) for g in groups)
    return np.asarray(out, dtype=np.float64).reshape(-1, 4)


def _footprint_of(rects) -> tuple[float, float, float, float]:
    return (min(r[0] for r in rects), min(r[1] for r in rects), max(r[2] for r in rects), max(r[3] for r in rects))
