"""The reference defenses: :mod:`.basic` (none, Gaussian noise, top-k, and the blockwise helpers),
:mod:`.suite` (clipping, DP-SGD, quantisation, temporal and sequence-aware defenses), :mod:`.action` (action
obfuscation), and the parameter checks they share (:mod:`.params`).

May import ``records`` and ``errors`` only (and torch, numpy; DP-SGD's accountant, opacus).
"""
