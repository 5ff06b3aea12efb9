"""TRACE: the learned temporal attack that rebuilds frames and actions from an ordered gradient stream.

TRACE (Temporal Reconstruction Attack on Consecutive Encodings; the paper's authors, title and venue are
cited in docs/trace.md) is an
amortised attack: a network trained on auxiliary trajectories maps the per-step gradients of an episode to
its RGB frames and actions, autoregressively. This implementation uses only the public plug-in API:
``fit(victim, auxiliary)`` collects train-layout episodes with ``auxiliary.collect(...)`` (the threat
model's auxiliary trajectories, never the held-out split), on the data protocol it is scored on
(``trace-windows``: windows cut from whole episodes; config field ``protocol``), and ``reconstruct(episode, victim)`` sees only the
released gradients. See docs/trace.md for the architecture, the presets and measured results.

Pipeline, per step t of an episode:

1. **Gradient features (fixed, no training).** For every weight gradient G (out x in; conv kernels
   flattened to out x in*k*k) a factorised sketch ``U^T (G/||G||) V`` with fixed Gaussian U, V (rank r,
   seeded) plus ``log ||G||``; for every bias gradient its normalised entries (or a fixed projection when
   long); and for every Linear layer with a bias the *closed-form layer input* ``z = G^T b / ||b||^2``:
   for one sample ``G = delta z^T`` and ``b = delta``, so this recovers the layer's input exactly (the
   NatureCNN's 1024 conv features, the policy head's 512 hidden features) and degrades gracefully when a
   defense perturbs G. The features are cheap (one pass per episode) and cached, so the learned part
   trains on a CPU.
2. **Gradient encoder (learned):** standardised features -> MLP -> a ``d_model`` gradient token.
3. **Interleaved causal sequence:** ``[START, g_1, p_2, g_2, ..., p_t, g_t]`` where ``g_s`` is the
   gradient token of step s and ``p_s`` the token of the attacker's own reconstruction of frame s-1 (a small
   CNN encoder), with a learned start token, type embeddings (start / gradient / image) and step
   embeddings. A causal transformer reads frame t at ``g_t``: it sees gradients up to t only.
4. **Decoders:** a transposed-conv image decoder (sigmoid RGB) and a linear action classifier.

``seq_len`` L is the *context window*: frame t sees the gradients of steps t-L+1..t and the attacker's own
reconstructions of the frames inside that window before t (L=1: one gradient, no previous image). With
L >= the episode length the window is the whole prefix. ``temporal=False`` (``trace_no_temporal``)
replaces steps 3 by an MLP on the single gradient token: a Learning-to-Invert-style single-frame learned
inversion with the same features, decoders, data and budget.

Training: teacher forcing (previous-image tokens from the true frames) for ``tf_fraction`` of the epochs,
then scheduled sampling (the parallel two-pass form: a no-grad teacher-forced pass predicts every frame,
then each previous-image token is replaced by the prediction with a probability that ramps to
``ss_max``). Loss: MSE + L1 on [0, 1] RGB + ``action_weight`` x cross-entropy on the action.

Closer to the paper (config fields; the ``paper`` preset sets them all): ``encoder=learned`` replaces step 1
by every layer's raw gradient, normalised per layer, and per-layer bilinear sketches ``U^T (G/||G||) V``
trained end to end; ``rollout_weight`` adds the loss of a pass fed only the model's own previous frames;
``aug_noise`` / ``aug_brightness`` augment; ``ss_max=0.8`` is the paper's scheduled sampling; and
``adaptive=true`` trains on auxiliary gradients released through the run's defense (``auxiliary.defense``,
public; the attacker's own random draws), the defense then keying the cache.

The package, one concern per module:

* :mod:`.config`: :class:`TraceConfig` (its hash keys the cache), the presets, the victim identity;
* :mod:`.model`: the fixed featuriser and the network (steps 1-4);
* :mod:`.data`: auxiliary episodes -> cached features (:class:`TraceData`);
* :mod:`.training`: the resumable training loop;
* :mod:`.attack`: the plug-in classes (``trace`` and its ablations).

Weights, cached features and training checkpoints are safetensors + JSON, kept with the plug-in API's
:class:`~gradleak_bench.artifacts.ArtifactCache` under ``<cache>/attackers/trace-<config hash>/``; training
checkpoints every epoch and resumes exactly. A cached or given (``weights=``) attacker trained for another
victim, task, checkpoint or gradient layout is refused with a :class:`~gradleak_bench.errors.GradleakError`.
"""
from gradleak_bench.baselines.attacks.trace.attack import (TRACE, TRACENoTemporal, TRACESeq1, TRACESeq4, TRACESeq8,
                                                           TRACESeq16, check_compatible)
from gradleak_bench.baselines.attacks.trace.config import (FEATURES_VERSION, FORMAT, PRESETS, TraceConfig,
                                                           gradient_layout, rgb_shape, victim_fingerprint,
                                                           victim_identity)
from gradleak_bench.baselines.attacks.trace.data import TraceData, psnr
from gradleak_bench.baselines.attacks.trace.model import GradientFeaturizer, TraceNet

__all__ = ["FEATURES_VERSION", "FORMAT", "PRESETS", "TRACE", "TRACENoTemporal", "TRACESeq1", "TRACESeq4", "TRACESeq8",
           "TRACESeq16", "GradientFeaturizer", "TraceConfig", "TraceData", "TraceNet", "check_compatible",
           "gradient_layout", "psnr", "rgb_shape", "victim_fingerprint", "victim_identity"]
