"""Thumbnails of an entry: truth | reconstruction | best prior for a few fixed held-out frames, recomputed here.

A thumbnail is never taken from a submitter: :func:`compute` re-runs the entry's bound code sealed (as
``verify`` does) on the frames of :data:`RULE` and draws what came back beside the truth and the entry's best
gradient-free prior (:mod:`gradleak_bench.priors`). What is written is data: one PNG per image field (and one
top-down plot per trajectory), and a JSON sidecar holding the frames, the prior names, the action sequences,
the plotted trajectory coordinates and the sha256 of the entry file and of each PNG. The page shows a
thumbnail only while both hashes hold, so a changed entry shows none until its thumbnails are recomputed.

Float results differ in their last bits across CPUs, so a regenerated thumbnail is compared within a
tolerance (:func:`differences`), never byte for byte.
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import CorruptFileError
from gradleak_bench.paths import file_sha256
from gradleak_bench.leaderboard.schema import Entry

FORMAT = "gradleak-bench-thumbnails/1"
EPISODES = 2
STEPS = 3
RULE = (f"the first {STEPS} steps of the first {EPISODES} held-out episodes in canonical order (episode E00 of "
        f"the {EPISODES} lowest-numbered test layouts); trajectories: those episodes' whole paths")
KINDS = ("truth", "reconstruction", "prior")
IMAGE_FIELDS = ("rgb", "depth")
TRAJECTORY_FIELD = "pose"
GAP = 2  # px between tiles (white), and twice that between episodes
PLOT = 128  # px: side of one episode's top-down trajectory plot
#: A regenerated image row may differ from the committed one by this mean absolute grey level (of 255);
#: a regenerated path point by this many metres; actions must match exactly (integers).
IMAGE_TOL = 2.0
PATH_TOL_M = 0.05
#: An optimisation attack's reconstruction follows the float path (torch's thread count, the CPU's kernels): over
#: thousands of Adam steps the last bits grow into visible pixels (QGI's committed strip: 8.0 grey levels apart
#: between one and two scorer threads, 7.9 with oneDNN's AVX2 kernels as well), while its error against the truth moves
#: by hundredths of a level. So a regenerated reconstruction row also passes when its mean absolute error against
#: the truth is within IMAGE_TOL of the committed row's and the two rows are within this many grey levels.
RECONSTRUCTION_DRIFT = 16.0
PATH_COLOURS = {"truth": (20, 20, 20), "reconstruction": (214, 39, 40), "prior": (31, 119, 180)}


@dataclass(frozen=True)
class Strip:
    """The recomputed frames of one entry (arrays, before they become files)."""

    entry: str
    entry_sha256: str
    frames: tuple[tuple[str, int], ...]
    priors: dict[str, str]
    images: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # field -> kind -> (n, H, W, 3) uint8
    actions: dict[str, tuple[int, ...]] = field(default_factory=dict)  # kind -> one action per frame
    paths: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # episode -> kind -> (T, 2) metres


@dataclass(frozen=True)
class Thumbnails:
    """The committed thumbnails of one entry, read as data and checked against the entry and the PNGs."""

    sidecar: Path
    frames: tuple[tuple[str, int], ...]
    priors: dict[str, str]
    pngs: dict[str, Path]  # field -> PNG (image fields, and ``pose`` for the trajectory plot)
    actions: dict[str, tuple[int, ...]]


def relative_stem(entry: Entry) -> Path:
    return entry.relative_path.with_suffix("")


def sidecar_path(root: Path, entry: Entry) -> Path:
    return root / relative_stem(entry).with_suffix(".json")


def png_path(root: Path, entry: Entry, field_name: str) -> Path:
    stem = relative_stem(entry)
    return root / stem.parent / f"{stem.name}.{field_name}.png"


def sha256_file(path: Path) -> str:
    return file_sha256(path)


# --- computing (a sealed re-run) -------------------------------------------------------------------------------


def compute(entry: Entry, entry_file: Path, fields_prior: dict[str, str], progress: bool = False) -> Strip:
    """Re-run ``entry``'s bound code sealed on the episodes of :data:`RULE` and collect truth, reconstruction
    and best prior of each shown field. ``fields_prior`` maps each field to show to its best prior's name
    (``prior:median_frame``), taken from the entry's board metric for that field."""
    from gradleak_bench.leaderboard.verify import _config
    from gradleak_bench.run.evaluation import Scorer

    folder = entry_file.parent
    with tempfile.TemporaryDirectory(prefix="gradleak-thumbnails-") as tmp:
        config = dataclasses.replace(_config(entry, folder, Path(tmp), EPISODES, None, False), control=True)
        result = Scorer(config).evaluate(progress=progress, resume=False)
        failed = [r.episode_id for r in result.rows if r.status != "ok"]
        if failed:
            from gradleak_bench.errors import GradleakError

            raise GradleakError(f"{entry.relative_path}: the re-run failed on {', '.join(failed)}; no thumbnail made")
        ids = [r.episode_id for r in result.rows]
        recons = {e: _read_recon(Path(tmp) / "run", e) for e in ids}
    dataset = _dataset(entry)
    truths = {e: dataset.episode(e) for e in ids}
    length = {e: truths[e].length for e in ids}
    priors = _prior_fields(entry, fields_prior, length)
    frames = tuple((e, t) for e in ids for t in range(min(STEPS, length[e])))
    strip = Strip(str(entry.relative_path), sha256_file(entry_file), frames, dict(fields_prior))
    for name in fields_prior:
        if name in IMAGE_FIELDS:
            strip.images[name] = {
                "truth": _tiles(name, [truths[e].steps[name][t] for e, t in frames]),
                "reconstruction": _tiles(name, [recons[e][name][t] for e, t in frames]),
                "prior": _tiles(name, [priors[e][name][t] for e, t in frames])}
        elif name == "action":
            strip.actions.update({
                "truth": tuple(int(truths[e].steps["action"][t]) for e, t in frames),
                "reconstruction": tuple(_action(recons[e]["action"][t]) for e, t in frames),
                "prior": tuple(int(priors[e]["action"][t]) for e, t in frames)})
        elif name == TRAJECTORY_FIELD:
            for e in ids:
                strip.paths[e] = {"truth": _xy(truths[e].steps["pose"]), "reconstruction": _xy(recons[e]["pose"]),
                                  "prior": _xy(priors[e]["pose"])}
    return strip


def _read_recon(run: Path, episode_id: str) -> dict[str, np.ndarray]:
    from gradleak_bench.run.store import load_arrays

    found = list(run.rglob(f"recons/{episode_id}.npz"))
    if not found:
        raise CorruptFileError(f"the thumbnail re-run kept no reconstruction of {episode_id}")
    return load_arrays(found[0])


def _dataset(entry: Entry) -> Any:
    """The entry's own held-out dataset (whichever data protocol its key names)."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench.leaderboard.checks import standard_dataset

    config = standard_dataset(entry.task, entry.victim, entry.checkpoint, entry.split, entry.dataset)
    if config.key == entry.dataset:
        return datasets.load_or_generate(config, progress=False)
    raise CorruptFileError(f"{entry.relative_path}: no standard dataset has the key {entry.dataset}")


def _prior_fields(entry: Entry, fields_prior: dict[str, str], length: dict[str, int]
                  ) -> dict[str, dict[str, np.ndarray]]:
    """Each episode's best-prior reconstruction of each field, exactly as the scorer applies the prior."""
    from gradleak_bench import priors as prior_module

    if not fields_prior:
        return {e: {} for e in length}
    sequence = _dataset(entry).config.sequence_length
    fitted = prior_module.load_or_fit(prior_module.config_for(entry.task, entry.victim, entry.checkpoint, sequence))
    refs = {r.name: r for r in prior_module.references(fitted, list(fields_prior))}
    out: dict[str, dict[str, np.ndarray]] = {}
    for e, n in length.items():
        out[e] = {}
        for name, prior in fields_prior.items():
            if prior not in refs:
                raise CorruptFileError(f"{entry.relative_path}: the best prior {prior!r} of {name} is not a fitted prior")
            out[e][name] = np.asarray(refs[prior].reconstruct(n)[name])
    return out


def _tiles(field_name: str, frames: list[np.ndarray]) -> np.ndarray:
    """Frames as (n, H, W, 3) uint8: RGB clipped to 0..255; depth as grey over the camera's 0..10 m range."""
    from gradleak_bench.metrics.images import DEPTH_RANGE_M

    out = []
    for frame in frames:
        x = np.asarray(frame, dtype=np.float64)
        if field_name == "depth":
            x = x.reshape(x.shape[:2])
            x = np.repeat((np.clip(np.nan_to_num(x, nan=0.0) / DEPTH_RANGE_M, 0, 1) * 255)[..., None], 3, axis=2)
        else:
            x = np.clip(np.nan_to_num(x, nan=0.0), 0, 255)
        out.append(np.rint(x).astype(np.uint8))
    return np.stack(out)


def _action(value: Any) -> int:
    """A reconstructed action as shown: -1 for a missing or non-integer one (scored as wrong)."""
    x = float(np.asarray(value).reshape(-1)[0])
    return int(x) if math.isfinite(x) and x >= 0 and x == int(x) else -1


def _xy(poses: np.ndarray) -> np.ndarray:
    return np.nan_to_num(np.asarray(poses, dtype=np.float64).reshape(len(poses), -1)[:, :2], nan=0.0)


# --- files ----------------------------------------------------------------------------------------------------


def image_png(images: dict[str, np.ndarray], frames: tuple[tuple[str, int], ...]) -> bytes:
    """Rows truth / reconstruction / prior, one tile per frame, a wider gap between episodes."""
    return _png(_compose(images, frames))


def _columns(frames: tuple[tuple[str, int], ...], w: int) -> tuple[list[int], int]:
    """Each tile's left edge and the strip's width: tiles of width ``w``, a double gap between episodes."""
    xs, x = [], 0
    for i, (episode, _) in enumerate(frames):
        if i:
            x += GAP * (2 if episode != frames[i - 1][0] else 1)
        xs.append(x)
        x += w
    return xs, x


def _compose(images: dict[str, np.ndarray], frames: tuple[tuple[str, int], ...]) -> np.ndarray:
    n, h, w, _ = images["truth"].shape
    xs, x = _columns(frames, w)
    canvas = np.full((len(KINDS) * h + (len(KINDS) - 1) * GAP, x, 3), 255, dtype=np.uint8)
    for row, kind in enumerate(KINDS):
        for i in range(n):
            y = row * (h + GAP)
            canvas[y:y + h, xs[i]:xs[i] + w] = images[kind][i]
    return canvas


def decompose(canvas: np.ndarray, frames: tuple[tuple[str, int], ...], tile: tuple[int, int]) -> dict[str, np.ndarray]:
    """The inverse of :func:`_compose` for tiles of ``tile`` = (H, W)."""
    h, w = tile
    xs, x = _columns(frames, w)
    if canvas.shape != (len(KINDS) * h + (len(KINDS) - 1) * GAP, x, 3):
        raise CorruptFileError(f"a thumbnail strip of shape {canvas.shape} is not {len(frames)} tiles of {h}x{w}")
    return {kind: np.stack([canvas[row * (h + GAP):row * (h + GAP) + h, xi:xi + w] for xi in xs])
            for row, kind in enumerate(KINDS)}


def trajectory_png(paths: dict[str, dict[str, np.ndarray]]) -> bytes:
    """One top-down plot per episode (world x right, y up; one scale for both axes, fitted to the three paths):
    truth black, reconstruction red, best prior blue, a dot at each start."""
    from PIL import Image, ImageDraw

    panels = []
    for kinds in paths.values():
        image = Image.new("RGB", (PLOT, PLOT), (255, 255, 255))
        draw = ImageDraw.Draw(image)
        draw.rectangle((0, 0, PLOT - 1, PLOT - 1), outline=(208, 215, 222))
        points = np.concatenate([p for p in kinds.values() if len(p)])
        lo, hi = points.min(axis=0), points.max(axis=0)
        scale = (PLOT - 8) / max(float((hi - lo).max()), 1e-3)
        for kind in ("prior", "reconstruction", "truth"):  # truth drawn last, on top
            xy = [(4 + (px - lo[0]) * scale, PLOT - 4 - (py - lo[1]) * scale) for px, py in kinds[kind]]
            if len(xy) > 1:
                draw.line(xy, fill=PATH_COLOURS[kind], width=2)
            if xy:
                x0, y0 = xy[0]
                draw.ellipse((x0 - 2, y0 - 2, x0 + 2, y0 + 2), fill=PATH_COLOURS[kind])
        panels.append(np.asarray(image))
    gap = np.full((PLOT, 2 * GAP, 3), 255, dtype=np.uint8)
    row = panels[0]
    for panel in panels[1:]:
        row = np.concatenate([row, gap, panel], axis=1)
    return _png(row)


def _png(canvas: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(canvas, "RGB").save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def read_png(path: Path) -> np.ndarray:
    """An 8-bit RGB PNG as an array (anything else is refused: these files are data, checked before use)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if image.format != "PNG" or image.mode != "RGB" or image.width * image.height > 4_000_000:
                raise CorruptFileError(f"{path}: not an 8-bit RGB PNG of a thumbnail's size")
            return np.asarray(image.convert("RGB"))
    except (OSError, UnidentifiedImageError) as exc:
        raise CorruptFileError(f"{path}: not a readable PNG ({exc})") from None


def write(strip: Strip, root: Path, entry: Entry) -> Path:
    """Write the strip's PNGs and sidecar under ``root`` (``leaderboard/thumbnails``); returns the sidecar."""
    from gradleak_bench import __version__
    from gradleak_bench.paths import atomic_write_bytes

    pngs, tiles = {}, {}
    for name, images in strip.images.items():
        path = png_path(root, entry, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, image_png(images, strip.frames))
        pngs[name], tiles[name] = path, list(images["truth"].shape[1:3])
    if strip.paths:
        path = png_path(root, entry, TRAJECTORY_FIELD)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, trajectory_png(strip.paths))
        pngs[TRAJECTORY_FIELD] = path
    sidecar = {
        "format": FORMAT, "entry": strip.entry, "entry_sha256": strip.entry_sha256, "rule": RULE,
        "frames": [[e, t] for e, t in strip.frames], "priors": strip.priors,
        "tiles": tiles, "png_sha256": {name: sha256_file(p) for name, p in pngs.items()},
        "actions": {k: list(v) for k, v in strip.actions.items()},
        "paths": {e: {k: np.round(v, 4).tolist() for k, v in kinds.items()} for e, kinds in strip.paths.items()},
        "gradleak_bench": __version__,
    }
    path = sidecar_path(root, entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, dump_sidecar(sidecar).encode())
    return path


def dump_sidecar(sidecar: dict[str, Any]) -> str:
    """Indented JSON with each innermost list (a frame, a point, an action sequence) on one line."""
    text = json.dumps(sidecar, indent=1)
    return re.sub(r"\[[^\[\]{}]*\]", lambda m: re.sub(r"\s+", " ", m.group(0)).replace("[ ", "[").replace(" ]", "]"),
                  text) + "\n"


def strip_from_files(root: Path, entry: Entry) -> Strip:
    """A committed thumbnail read back as a :class:`Strip` (to compare with a regenerated one)."""
    data = _read_sidecar(sidecar_path(root, entry), entry)
    frames = tuple((e, t) for e, t in data["frames"])
    images = {name: decompose(read_png(png_path(root, entry, name)), frames, tuple(tile))
              for name, tile in data["tiles"].items()}
    paths = {e: {k: np.asarray(v, dtype=np.float64).reshape(-1, 2) for k, v in kinds.items()}
             for e, kinds in data["paths"].items()}
    return Strip(data["entry"], data["entry_sha256"], frames, dict(data["priors"]), images,
                 {k: tuple(v) for k, v in data["actions"].items()}, paths)


def _grey_distance(x: np.ndarray, y: np.ndarray) -> float:
    """Mean absolute difference of two images, in grey levels."""
    return float(np.abs(x.astype(np.float64) - y.astype(np.float64)).mean())


def differences(committed: Strip, fresh: Strip) -> list[str]:
    """Where a regenerated strip is not the committed one within the tolerances (empty: it regenerates)."""
    found = []
    if committed.frames != fresh.frames or committed.priors != fresh.priors:
        found.append(f"frames or priors differ: {committed.frames} / {committed.priors} vs {fresh.frames} / "
                     f"{fresh.priors}")
        return found
    for name in sorted(set(committed.images) | set(fresh.images)):
        for kind in KINDS:
            a, b = committed.images.get(name, {}).get(kind), fresh.images.get(name, {}).get(kind)
            if a is None or b is None or a.shape != b.shape:
                found.append(f"{name} {kind}: missing or of another shape")
                continue
            diff = _grey_distance(a, b)
            if diff <= IMAGE_TOL:
                continue
            message = f"{name} {kind}: mean |difference| {diff:.3g} grey levels > {IMAGE_TOL}"
            truth = committed.images[name].get("truth")
            if kind == "reconstruction" and truth is not None and truth.shape == a.shape:
                was, now = _grey_distance(a, truth), _grey_distance(b, truth)
                if abs(was - now) <= IMAGE_TOL and diff <= RECONSTRUCTION_DRIFT:
                    continue  # the same reconstruction on another float path
                message += f", and its error against the truth {now:.3g} against the committed {was:.3g}"
            found.append(message)
    if committed.actions != fresh.actions:
        found.append(f"actions differ: {committed.actions} vs {fresh.actions}")
    for e in sorted(set(committed.paths) | set(fresh.paths)):
        for kind in KINDS:
            a, b = committed.paths.get(e, {}).get(kind), fresh.paths.get(e, {}).get(kind)
            if a is None or b is None or a.shape != b.shape or float(np.abs(a - b).max(initial=0.0)) > PATH_TOL_M:
                found.append(f"path {e} {kind}: missing, of another length or more than {PATH_TOL_M} m apart")
    return found


# --- reading for the page -----------------------------------------------------------------------------------


def load(root: Path, entry: Entry, entry_file: Path) -> Thumbnails | None:
    """The entry's committed thumbnails, or None when there are none or they are stale (made for another
    version of the entry file, or a PNG changed since). A malformed sidecar is refused (:class:`CorruptFileError`)."""
    path = sidecar_path(root, entry)
    if not path.is_file():
        return None
    data = _read_sidecar(path, entry)
    if data["entry_sha256"] != sha256_file(entry_file):
        return None
    pngs = {}
    for name, digest in data["png_sha256"].items():
        png = png_path(root, entry, name)
        if not png.is_file() or sha256_file(png) != digest:
            return None
        pngs[name] = png
    frames = tuple((e, t) for e, t in data["frames"])
    return Thumbnails(path, frames, dict(data["priors"]), pngs, {k: tuple(v) for k, v in data["actions"].items()})


def _read_sidecar(path: Path, entry: Entry) -> dict[str, Any]:
    """The sidecar, every field type-checked (it is a file in a repository anyone can send a change to)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"{path}: not a readable thumbnail sidecar ({exc})") from None

    def bad(what: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: {what}; recompute it with `gradleak-bench leaderboard --thumbnails`")

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise bad(f"not a {FORMAT} file")
    if data.get("entry") != str(entry.relative_path) or not isinstance(data.get("entry_sha256"), str):
        raise bad(f"made for {data.get('entry')!r}, not {entry.relative_path}")
    frames = data.get("frames")
    if not isinstance(frames, list) or not frames or not all(
            isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and _is_int(f[1]) for f in frames):
        raise bad("'frames' is not a list of [episode, t]")
    for key in ("priors", "png_sha256", "tiles", "actions", "paths"):
        if not isinstance(data.get(key), dict):
            raise bad(f"'{key}' is not an object")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in {**data["priors"], **data["png_sha256"]}.items()):
        raise bad("'priors' and 'png_sha256' map names to strings")
    if set(data["png_sha256"]) - set(IMAGE_FIELDS) - {TRAJECTORY_FIELD} or set(data["tiles"]) - set(IMAGE_FIELDS):
        raise bad("thumbnails of unknown fields")
    if not all(isinstance(t, list) and len(t) == 2 and all(_is_int(x) and 0 < x <= 512 for x in t)
               for t in data["tiles"].values()):
        raise bad("'tiles' are not [height, width]")
    if not all(k in KINDS and isinstance(v, list) and len(v) == len(frames) and all(_is_int(a) for a in v)
               for k, v in data["actions"].items()):
        raise bad("'actions' are not one integer per frame for truth / reconstruction / prior")
    for kinds in data["paths"].values():
        if not isinstance(kinds, dict) or not all(
                k in KINDS and isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and all(
                    _is_number(c) for c in p) for p in v) for k, v in kinds.items()):
            raise bad("'paths' are not lists of [x, y] per kind")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
