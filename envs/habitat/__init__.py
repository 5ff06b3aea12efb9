"""The Habitat backend: ``habitat_sim.Simulator`` on scenes given by path (habitat-sim is installed with
conda; there is no PyPI wheel).

May import the backend protocol and ``common`` of ``envs/``, and ``errors``.
"""
