"""The gradient-inversion toolkit: what optimisation-based attacks share, public so an attack can be built on
it (part of the plug-in API; the reference attacks ``inverting_gradients``, ``dlg``, ``idlg``, ``qgi`` and
``rgi`` in ``baselines/attacks/`` are written with it, one per file; docs/inversion-attacks.md). May import
``records`` only (and torch, SB3).

Every such attack searches for an observation whose gradient matches the released one. The pieces:

* **modalities** (:mod:`.modalities`): each observation key of the victim as a unit-box variable ``u`` in
  [0, 1], mapped affinely to the policy's input range (:class:`Modality`, :func:`modalities`); the policy's
  observation from the variables (:func:`as_policy_obs`); truth-shaped fields back (:func:`to_fields`);
  :func:`total_variation`; :func:`init_unit` (the initial candidates).
* **the victim network** (:mod:`.network`): :class:`VictimNet` splits an SB3 policy into ``features`` (the
  input of its linear layers) and ``head`` (Q-values, or logits and value); the per-frame objectives whose
  gradient is matched: the victim's own loss (:func:`original_objective`, its unknown scalar targets listed
  by :func:`objective_scalars`) or QGI/RGI's objective-agnostic surrogate (:func:`surrogate_objective`).
* **the gradient matcher** (:mod:`.matching`): :class:`GradientMatcher` computes, for a *batch of independent
  candidate frames*, the per-frame dot product and squared norm between the candidate's per-sample parameter
  gradient and the released gradient, differentiably with respect to the candidates: one batched forward
  pass, one ``create_graph`` backward to each layer's output (row i of it belongs to frame i alone, because
  the frames' objectives are summed, never mixed), then per-layer products (``g a^T`` for a Linear layer,
  ``g`` times the unfolded patches for a Conv2d); :meth:`~GradientMatcher.cosine_loss` and
  :meth:`~GradientMatcher.l2_loss`. The frames of an episode (and the restarts) are one batched
  optimisation problem, not a Python loop over frames (``benchmarks/bench_inversion.py``).
* **the optimiser loop** (:mod:`.loop`): :func:`adam_inversion` (Adam, optionally signed, step decay at 3/8,
  5/8, 7/8 of the iterations, box constraints, per-frame failure flags: a frame whose loss or iterate turns
  non-finite is masked out and returned as NaN by :func:`nan_rows`); restarts as rows of one batch
  (:func:`repeat`, :func:`best_restart`).

Example (a minimal cosine-matching attack on the observation, the rule action given):

    net, mods = VictimNet(victim), modalities(victim)
    matcher = GradientMatcher(net, episode.gradients.tensors)
    objective = original_objective(net, actions, {"advantage": adv, "return": ret})
    u = {k: init_unit((T, *m.shape), torch.Generator().manual_seed(0)) for k, m in mods.items()}
    loss_fn = lambda v: matcher.cosine_loss(lambda: objective(net.features(as_policy_obs(mods, v, plain))))
    loss, failed = adam_inversion(u, {k: (0.0, 1.0) for k in mods}, loss_fn, iterations=100, lr=0.1, signed=True)
    fields = nan_rows(to_fields(mods, u), failed.numpy())
"""
from gradleak_bench.inversion.loop import adam_inversion, best_restart, nan_rows, repeat
from gradleak_bench.inversion.matching import GradientMatcher
from gradleak_bench.inversion.modalities import (IMAGE_FIELDS, Modality, as_policy_obs, init_unit, modalities,
                                                 to_fields, total_variation)
from gradleak_bench.inversion.network import VictimNet, objective_scalars, original_objective, surrogate_objective

__all__ = ["IMAGE_FIELDS", "GradientMatcher", "Modality", "VictimNet", "adam_inversion", "as_policy_obs",
           "best_restart", "init_unit", "modalities", "nan_rows", "objective_scalars", "original_objective",
           "repeat", "surrogate_objective", "to_fields", "total_variation"]
