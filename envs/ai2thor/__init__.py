"""The AI2-THOR backend: iTHOR scenes driven through ``ai2thor.controller.Controller``
(``pip install 'gradleak-bench[ai2thor]'``; the Unity build downloads on first use).

May import the backend protocol and ``common`` of ``envs/``, ``splits`` and ``errors``.
"""
