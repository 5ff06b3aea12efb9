"""``idlg``: DLG with the action read off the gradient first (the closed-form rule) instead of optimised.

Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", arXiv:2001.02610, 2020.
docs/inversion-attacks.md.
"""
from __future__ import annotations

from typing import ClassVar

from gradleak_bench.baselines.attacks.dlg import DLG


class IDLG(DLG):
    """iDLG (Zhao et al. 2020): DLG with the action read off the gradient first (the closed-form rule)."""

    name: ClassVar[str] = "idlg"
    summary: ClassVar[str] = "Zhao et al.: DLG with the action read from the gradient first (params: preset, iterations)"
    label_from_gradient: ClassVar[bool] = True
