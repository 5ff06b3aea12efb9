"""benchmarks/trace_data_curve.py, its pure parts: the plan at fixed compute, the log-linear fit and its
extrapolation, the record written and resumed, the deadline; and the warm-up it sets. No training."""
from __future__ import annotations

import datetime as dt
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import trace_data_curve as dc  # noqa: E402

from gradleak_bench.baselines.attacks import trace as tr  # noqa: E402
from gradleak_bench.baselines.attacks.trace.training import learning_rate  # noqa: E402


def _curve(epochs_done: int, psnrs: list[float]) -> dict:
    return {"epochs_done": epochs_done,
            "history": [{"epoch": i + 1, "p_scheduled_sampling": 0.0, "loss": 1.0, "mse": 0.05, "ce": 1.0,
                         "rollout": 0.5, "seconds": 24.0, "sequences_per_s": 1.0, "val_psnr_autoregressive": v,
                         "val_action_accuracy": 0.5} for i, v in enumerate(psnrs)]}


def test_every_point_gets_the_same_compute():
    points = dc.plan((24, 384, 96), ("learned", "analytic"), 384, 24, 2)
    assert [p.key for p in points] == ["learned-24", "analytic-24", "learned-384", "analytic-384",
                                       "learned-96", "analytic-96"]
    for p in points:
        o = p.overrides()
        assert o["epochs"] * o["max_episodes"] == 384 and o["batch_size"] == 24 and o["warmup_steps"] == 2
        assert o["val_episodes"] == dc.VAL_SEQUENCES and o["encoder"] == p.encoder
    # up to one sequence per train layout, then every layout equally often (the plan is layout-major)
    assert [p.overrides()["episodes_per_layout"] for p in points[::2]] == [1, 4, 1]
    with pytest.raises(ValueError, match="whole number"):
        dc.plan((100,), ("learned",), 384, 24, 2)


def test_loglinear_fit_and_extrapolation():
    a, b = dc.fit_loglinear([10, 100, 1000], [12.0, 13.0, 14.0])
    assert (a, b) == pytest.approx((11.0, 1.0))
    with pytest.raises(ValueError, match="two distinct"):
        dc.fit_loglinear([24, 24], [1.0, 2.0])
    record = dc.new_record(dc.plan((24, 96), ("learned", "analytic"), 96, 24, 1), "cmd")
    for key, psnr in (("learned-24", 12.0), ("learned-96", 13.0), ("analytic-24", 14.0)):
        n = record["points"][key]["epochs_planned"]
        dc.record_call(record, key, _curve(n, [10.0] * (n - 1) + [psnr]), 1.0, 1.0, (1.0, 1.0), False)
    out = dc.extrapolation(record)
    assert "analytic" not in out  # one finished size: no fit
    fit = out["learned"]
    assert fit["points"] == [24, 96] and fit["db_per_decade"] == pytest.approx(1 / math.log10(4), abs=1e-3)
    assert fit["at_paper_sequences_db"] == pytest.approx(13.0 + math.log10(dc.PAPER_SEQUENCES / 96) / math.log10(4),
                                                         abs=0.01)
    assert "not a measurement" in out["note"]


def test_record_is_written_after_each_epoch_and_resumed(tmp_path):
    points = dc.plan((24,), ("learned",), 48, 24, 1)
    path = tmp_path / "curve.json"
    record = dc.load_record(path, points, "first")
    assert record["points"]["learned-24"]["epochs_done"] == 0 and not dc.done(record["points"]["learned-24"])
    dc.record_call(record, "learned-24", _curve(1, [11.0]), 30.0, 40.0, (1.0, 2.0), True)
    dc.write_record(path, record)
    again = dc.load_record(path, points, "second")  # a rerun continues the record
    entry = again["points"]["learned-24"]
    assert entry["epochs_done"] == 1 and entry["calls"][0]["includes_collection"] and again["command"] == "second"
    assert json.loads(path.read_text())["cpu_seconds_used"] == 30.0
    dc.record_call(again, "learned-24", _curve(2, [11.0, 12.0]), 20.0, 25.0, (2.0, 2.0), False)
    dc.record_call(again, "learned-24", _curve(2, [11.0, 12.0]), 3.0, 3.0, (2.0, 2.0), False)  # loaded only
    assert dc.done(entry) and len(entry["history"]) == 2 and dc.cpu_used(again) == 53.0
    assert [c["new_epoch"] for c in entry["calls"]] == [True, True, False]
    assert not list(tmp_path.glob(".*tmp*"))  # the write is atomic: no temp file left
    other = dc.plan((24,), ("analytic",), 48, 24, 1)  # other settings: another run, a new record
    assert dc.load_record(path, other, "x")["points"].keys() == {"analytic-24"}
    # a record made on other weights of the victim (retrained since) is another run: its epochs do not count
    stale = json.loads(path.read_text())
    stale["settings"]["weights_sha256"] = "0" * 64
    path.write_text(json.dumps(stale))
    assert dc.load_record(path, points, "y")["points"]["learned-24"]["epochs_done"] == 0


def test_deadline_and_epoch_estimate():
    now = dt.datetime(2026, 12, 3, 10, 0, tzinfo=dt.timezone.utc)
    assert dc.deadline_from("12:35", None, now) == now.replace(hour=12, minute=35)
    assert dc.deadline_from("12:35", 10, now) == now + dt.timedelta(minutes=10)
    assert dc.deadline_from("09:00", None, now).day == 4  # already past today: tomorrow
    with pytest.raises(ValueError):
        dc.deadline_from(None, None, now)
    record = dc.new_record(dc.plan((24, 96), ("learned",), 96, 24, 1), "cmd")
    first = dc.epoch_estimate(record, record["points"]["learned-96"])
    dc.record_call(record, "learned-24", _curve(1, [11.0]), 1.0, 1.0, (1.0, 1.0), False)  # 24 s for 24
    assert dc.epoch_estimate(record, record["points"]["learned-96"]) < first  # measured 1 s/seq < 1.5 default


def test_warmup_steps_set_the_schedule_and_stay_out_of_old_hashes():
    default = tr.TraceConfig(lr=1.0)
    assert "warmup_steps" not in default.to_dict()
    assert tr.TraceConfig(warmup_steps=2).to_dict()["warmup_steps"] == 2
    # default: one epoch of warm-up, as before the field existed
    assert learning_rate(default, 0, 4, 16) == pytest.approx(0.25)
    assert learning_rate(default, 3, 4, 16) == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 16)))
    fixed = tr.TraceConfig(lr=1.0, warmup_steps=2)  # the same schedule per step whatever the epoch length
    assert [learning_rate(fixed, s, 1, 16) for s in range(16)] == [learning_rate(fixed, s, 16, 16)
                                                                  for s in range(16)]
