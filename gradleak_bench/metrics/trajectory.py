"""Trajectory metrics for the ``pose`` field: where the robot went, scored against where it really went.

Every metric takes poses ``(T, 3)`` (x, y, yaw; metres, radians, world frame) on both sides, uses only the
(x, y) positions, and returns one value per episode. Each comes twice:

* **unaligned** (``ate``, ``hausdorff``, ...): the reconstruction as returned, in the world frame. The start
  pose is private, so an attack must place the path itself (a start prior learned on train layouts, say);
  these numbers are honest about that.
* **aligned** (``*_aligned``): the reconstruction first moved by the rigid SE(2) motion (rotation +
  translation, no scale) that best fits its positions to the true ones in least squares (Umeyama / Kabsch
  in 2-D, closed form). Alignment uses the truth, so these measure the *shape* of the path only, as the
  usual "aligned ATE" of visual odometry does.

Metrics (all in metres unless said otherwise):

* ``ate``: absolute trajectory error, the RMSE over steps of the position error.
* ``hausdorff``: symmetric Hausdorff distance between the two point sets (``scipy.spatial.distance``).
* ``frechet``: discrete Frechet distance (``similaritymeasures.frechet_dist``).
* ``dtw_error``: mean position error along the optimal dynamic-time-warping alignment
  (``similaritymeasures.dtw`` with Euclidean cost, path from ``similaritymeasures.dtw_path``): ATE that
  forgives a reconstruction running ahead or behind in time.
* ``keypoint_hit_rate``: fraction of the episode's key points that the reconstructed path comes within
  :data:`HIT_RADIUS_M` of. Key points come from the layout geometry and the true path: the centre of every
  doorway the robot passed through, and, for every furniture piece the robot came within
  :data:`APPROACH_M` of, the true position of its closest approach. NaN when the true path has no key
  point (then it is left out of the mean and shows as a failed frame).
* ``room_sequence_accuracy``: 1 - Levenshtein distance / the longer length between the sequences of rooms
  visited (consecutive repeats collapsed; a position outside the apartment is its own "room" -1). In [0, 1].

The last two need the layout: their spec sets ``needs_episode`` and the runner passes the truth
:class:`~gradleak_bench.records.Episode` (the scorer has the layout id; an attack never does). The layout's
facts come from the episode's own backend (``Episode.backend``, :meth:`Backend.layout_facts`); a backend that
has none (AI2-THOR, Habitat: no room map without the simulator) is refused with
:class:`~gradleak_bench.errors.LayoutFactsUnavailableError`, never scored on another scene.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gradleak_bench.errors import LayoutFactsUnavailableError
from gradleak_bench.metrics.registry import MetricSpec, register_metric

HIT_RADIUS_M = 0.5
"""A key point is hit when the reconstructed path comes this close to it."""

APPROACH_M = 0.5
"""A furniture piece is approached when the true robot centre comes this close to its footprint."""


# ------------------------------------------------------------------------------------------ helpers


def _positions(metric: str, recon: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(x, y) of both sides as float64 ``(T, 2)``; None when the reconstruction holds NaN/Inf."""
    recon, truth = np.asarray(recon, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    if recon.shape != truth.shape or recon.ndim != 2 or recon.shape[1] not in (2, 3) or len(truth) == 0:
        raise ValueError(f"{metric}: expected poses (T, 3) or positions (T, 2) of the same shape on both sides, "
                         f"got reconstruction {recon.shape} and truth {truth.shape}.")
    if not np.isfinite(recon[:, :2]).all():
        return None
    return recon[:, :2], truth[:, :2]


def align_se2(recon: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """The rigid 2-D motion (rotation ``angle``, translation) that best maps ``recon`` positions onto
    ``truth`` in least squares (Umeyama without scale; closed form in 2-D), and the moved poses.

    Args:
        recon: Poses ``(T, 3)`` or positions ``(T, 2)``.
        truth: The same shape.

    Returns:
        ``(aligned, angle, translation)``: ``recon`` with positions rotated by ``angle`` and translated (and
        yaw, when present, increased by ``angle``, wrapped to [-pi, pi)).

    Example:
        >>> import numpy as np
        >>> truth = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
        >>> recon = truth @ np.array([[0.0, -1.0], [1.0, 0.0]]) + 5.0  # rotated by -90 deg, shifted
        >>> aligned, angle, t = align_se2(recon, truth)
        >>> np.allclose(aligned, truth), round(float(np.degrees(angle)), 6)
        (True, 90.0)
    """
    recon, truth = np.asarray(recon, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    p, q = recon[:, :2], truth[:, :2]
    pc, qc = p - p.mean(axis=0), q - q.mean(axis=0)
    angle = float(np.arctan2((pc[:, 0] * qc[:, 1] - pc[:, 1] * qc[:, 0]).sum(), (pc * qc).sum()))
    c, s = np.cos(angle), np.sin(angle)
    rot = np.array([[c, -s], [s, c]])
    translation = q.mean(axis=0) - rot @ p.mean(axis=0)
    out = recon.copy()
    out[:, :2] = p @ rot.T + translation
    if out.shape[1] > 2:
        out[:, 2] = (out[:, 2] + angle + np.pi) % (2 * np.pi) - np.pi
    return out, angle, translation


def hausdorff(p: np.ndarray, q: np.ndarray) -> float:
    """Symmetric Hausdorff distance of two point sets (scipy's directed distance, both ways)."""
    from scipy.spatial.distance import directed_hausdorff

    return float(max(directed_hausdorff(p, q)[0], directed_hausdorff(q, p)[0]))


def frechet(p: np.ndarray, q: np.ndarray) -> float:
    """Discrete Frechet distance of two polylines (``similaritymeasures.frechet_dist``)."""
    import similaritymeasures

    return float(similaritymeasures.frechet_dist(p, q))


def dtw_mean_error(p: np.ndarray, q: np.ndarray) -> float:
    """Mean Euclidean distance between the point pairs of the optimal DTW alignment of ``p`` and ``q``
    (Euclidean cost; ``similaritymeasures.dtw`` and ``dtw_path``)."""
    import similaritymeasures

    _, cumulative = similaritymeasures.dtw(p, q)
    path = similaritymeasures.dtw_path(cumulative)
    return float(np.linalg.norm(p[path[:, 0]] - q[path[:, 1]], axis=1).mean())


def levenshtein(a: list[int], b: list[int]) -> int:
    """Edit distance (insert, delete, substitute; unit costs) between two short integer sequences.

    Example:
        >>> levenshtein([0, 1, 2], [0, 2])
        1
    """
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def room_sequence(layout, positions: np.ndarray) -> list[int]:
    """Rooms visited along ``positions`` (``LayoutFacts.room_of``; -1 outside), consecutive repeats collapsed.
    ``layout``: the episode's :class:`~gradleak_bench.envs.backend.LayoutFacts` (a PyBullet ``Apartment`` is
    read as its facts)."""
    layout = as_layout(layout)
    rooms = [layout.room_of(float(x), float(y)) for x, y in positions]
    return [r for i, r in enumerate(rooms) if i == 0 or r != rooms[i - 1]]


def _rect_distance(points: np.ndarray, rect: np.ndarray) -> np.ndarray:
    dx = np.maximum(np.maximum(rect[0] - points[:, 0], points[:, 0] - rect[2]), 0.0)
    dy = np.maximum(np.maximum(rect[1] - points[:, 1], points[:, 1] - rect[3]), 0.0)
    return np.hypot(dx, dy)


def key_points(layout, truth_positions: np.ndarray, approach: float = APPROACH_M) -> np.ndarray:
    """Key points ``(K, 2)`` of a true path in its layout: the centre of each doorway passed through (once per
    doorway), then the closest-approach position to each furniture piece that the path comes within
    ``approach`` metres of (once per piece). ``layout`` as in :func:`room_sequence`.

    Raises:
        LayoutFactsUnavailableError: When the layout has no room map (doorways join rooms).
    """
    layout = as_layout(layout)
    if layout.rooms is None:
        raise LayoutFactsUnavailableError(
            f"key points need the rooms and doorways of the layout; the {layout.backend} scene "
            f"{layout.scene} has no room map.")
    pts: list[np.ndarray] = []
    centres = layout.doorway_centres
    rooms = [layout.room_of(float(x), float(y)) for x, y in truth_positions]
    used: set[int] = set()
    for t in range(len(rooms) - 1):
        a, b = rooms[t], rooms[t + 1]
        if a == b or a < 0 or b < 0:
            continue
        doors = [i for i, d in enumerate(layout.doors) if set(d) == {a, b}]
        if not doors:
            continue
        mid = (truth_positions[t] + truth_positions[t + 1]) / 2
        best = min(doors, key=lambda i: float(np.hypot(*(centres[i] - mid))))
        if best not in used:
            used.add(best)
            pts.append(centres[best])
    for rect in layout.furniture:
        dist = _rect_distance(truth_positions, rect)
        if dist.min() <= approach:
            pts.append(truth_positions[int(dist.argmin())])
    return np.asarray(pts, dtype=np.float64).reshape(-1, 2)


def as_layout(layout):
    """``layout`` as :class:`~gradleak_bench.envs.backend.LayoutFacts` (a PyBullet ``Apartment`` converted)."""
    from gradleak_bench.envs.backend import LayoutFacts

    if isinstance(layout, LayoutFacts):
        return layout
    from gradleak_bench.envs.pybullet.apartment import Apartment

    if isinstance(layout, Apartment):
        from gradleak_bench.envs.pybullet.adapter import apartment_facts

        return apartment_facts(layout)
    raise TypeError(f"a layout is LayoutFacts (or a PyBullet Apartment), not {type(layout).__name__}")


def _layout(episode=None, layout_id: int | None = None, apartment=None):
    """The layout the episode ran in, from its own backend (``episode.backend``; PyBullet for a bare
    ``layout_id``). A backend that cannot give layout facts is refused, never replaced by a PyBullet scene."""
    if apartment is not None:
        return as_layout(apartment)
    backend = "pybullet"
    if layout_id is None:
        if episode is None:
            raise ValueError("this metric needs the layout: pass episode=, layout_id= or apartment=")
        layout_id, backend = episode.layout_id, episode.backend
    from gradleak_bench.envs.backend import backend_class

    return backend_class(backend).layout_facts(int(layout_id))


# ------------------------------------------------------------------------------------------ metrics

PairScore = Callable[[np.ndarray, np.ndarray], float]


def _paths(name: str, recon: np.ndarray, truth: np.ndarray, aligned: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """The reconstructed and true positions to score (the reconstruction rigidly aligned when asked), or None."""
    pair = _positions(name, recon, truth)
    if pair is None:
        return None
    p, q = pair
    return (align_se2(p, q)[0], q) if aligned else (p, q)


def _episode_metric(name: str, score: PairScore, aligned: bool) -> Callable[..., np.ndarray]:
    def fn(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
        pair = _paths(name, recon, truth, aligned)
        return np.array([np.nan]) if pair is None else np.array([score(*pair)])

    fn.__name__ = name
    fn.__doc__ = f"{name}: one value per episode (see the module docstring)."
    return fn


def _context_metric(name: str, score: Callable[[object, np.ndarray, np.ndarray], float], aligned: bool):
    def fn(recon: np.ndarray, truth: np.ndarray, *, episode=None, layout_id: int | None = None,
           apartment=None) -> np.ndarray:
        pair = _paths(name, recon, truth, aligned)
        return np.array([np.nan]) if pair is None else np.array([score(_layout(episode, layout_id, apartment), *pair)])

    fn.__name__ = name
    fn.__doc__ = f"{name}: one value per episode; needs the layout (episode=, layout_id= or apartment=)."
    return fn


def _ate(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sqrt((np.sum((p - q) ** 2, axis=1)).mean()))


def _keypoint_hits(layout, p: np.ndarray, q: np.ndarray) -> float:
    keys = key_points(layout, q)
    if len(keys) == 0:
        return float("nan")
    dist = np.linalg.norm(keys[:, None, :] - p[None, :, :], axis=2).min(axis=1)
    return float((dist <= HIT_RADIUS_M).mean())


def _room_accuracy(layout, p: np.ndarray, q: np.ndarray) -> float:
    if layout.rooms is None:
        raise LayoutFactsUnavailableError(f"room_sequence_accuracy needs the rooms of the layout; the "
                                          f"{layout.backend} scene {layout.scene} has no room map.")
    a, b = room_sequence(layout, p), room_sequence(layout, q)
    return 1.0 - levenshtein(a, b) / max(len(a), len(b))


ate = _episode_metric("ate", _ate, False)
ate_aligned = _episode_metric("ate_aligned", _ate, True)
hausdorff_error = _episode_metric("hausdorff", hausdorff, False)
hausdorff_aligned = _episode_metric("hausdorff_aligned", hausdorff, True)
frechet_error = _episode_metric("frechet", frechet, False)
frechet_aligned = _episode_metric("frechet_aligned", frechet, True)
dtw_error = _episode_metric("dtw_error", dtw_mean_error, False)
dtw_error_aligned = _episode_metric("dtw_error_aligned", dtw_mean_error, True)
keypoint_hit_rate = _context_metric("keypoint_hit_rate", _keypoint_hits, False)
keypoint_hit_rate_aligned = _context_metric("keypoint_hit_rate_aligned", _keypoint_hits, True)
room_sequence_accuracy = _context_metric("room_sequence_accuracy", _room_accuracy, False)
room_sequence_accuracy_aligned = _context_metric("room_sequence_accuracy_aligned", _room_accuracy, True)

_ALIGNED = "after the best rigid SE(2) fit of the reconstructed positions to the true ones (shape only)"
_WORLD = "in the world frame, as reconstructed (the start pose is private)"
TRAJECTORY_METRICS = tuple(
    spec for base, fns, higher, unit, needs, what in (
        ("ate", (ate, ate_aligned), False, "m", False, "RMSE of the position error over steps"),
        ("hausdorff", (hausdorff_error, hausdorff_aligned), False, "m", False,
         "symmetric Hausdorff distance between the position sets (scipy)"),
        ("frechet", (frechet_error, frechet_aligned), False, "m", False,
         "discrete Frechet distance between the paths (similaritymeasures)"),
        ("dtw_error", (dtw_error, dtw_error_aligned), False, "m", False,
         "mean position error along the optimal DTW alignment (similaritymeasures, Euclidean cost)"),
        ("keypoint_hit_rate", (keypoint_hit_rate, keypoint_hit_rate_aligned), True, "", True,
         f"fraction of the true path's key points (doorways passed, furniture approached within {APPROACH_M} m) "
         f"the reconstruction comes within {HIT_RADIUS_M} m of; NaN without key points"),
        ("room_sequence_accuracy", (room_sequence_accuracy, room_sequence_accuracy_aligned), True, "", True,
         "1 - Levenshtein / longer length of the visited-room sequences (repeats collapsed), in [0,1]"),
    )
    for spec in (
        MetricSpec(base, "pose", fns[0], higher, unit, f"{what}; {_WORLD}.", False, needs_episode=needs),
        MetricSpec(f"{base}_aligned", "pose", fns[1], higher, unit, f"{what}; {_ALIGNED}.", False,
                   needs_episode=needs),
    )
)

for _spec in TRAJECTORY_METRICS:
    register_metric(_spec)
