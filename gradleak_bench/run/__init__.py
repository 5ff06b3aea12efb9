"""The run path: config, per-episode pipeline, sealed plug-in hosts, the scorer that owns the truth, the
resumable store, executors, shards, tracking and the defense grid (docs/evaluate.md)."""
