"""The reference attacks, one per file (TRACE is the package :mod:`.trace`): the closed-form action attacks,
the optimisation attacks built on :mod:`gradleak_bench.inversion`, and the trajectory attacks.

May import ``records``, ``inversion``, ``artifacts``, ``tasks``, ``errors``, ``progress`` and ``dataset``
(TRACE reads the names of the data protocols from it); never ``run/``, ``leaderboard/`` or ``cli``.
"""
