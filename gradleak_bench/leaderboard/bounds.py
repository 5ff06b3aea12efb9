"""The possible range of each leaderboard metric: the schema refuses an entry outside it when it reads one,
and the checks and ``verify`` ask it too."""
from __future__ import annotations

import math
import re

#: The range every per-episode value (and so every mean and CI end) of a metric lies in. PSNRs are of clipped
#: reconstructions (MSE <= data range squared) capped at MAX_PSNR_DB; errors and distances are >= 0.
BOUNDS: tuple[tuple[str, tuple[float, float]], ...] = (
    (r"(action_accuracy|action_hist_tv|bbox_iou|keypoint_hit_rate.*|room_sequence_accuracy.*)", (0.0, 1.0)),
    (r".*_psnr(_y)?", (0.0, 100.0)),
    (r".*_ssim(_y)?", (-1.0, 1.0)),
    (r"(ate|hausdorff|frechet|dtw_error).*|.*_mse|.*_error", (0.0, math.inf)),
)


def bounds(metric: str) -> tuple[float, float]:
    """The closed range ``(low, high)`` of ``metric``'s values; unbounded for a metric not listed."""
    for pattern, rng in BOUNDS:
        if re.fullmatch(pattern, metric):
            return rng
    return (-math.inf, math.inf)
