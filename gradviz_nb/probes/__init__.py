"""Live-model probes: they run the model, install hooks or read ``.grad`` (and restore what they touch).

Pure analyses of a traced graph live in ``gradviz_nb.analysis``; probes may use them, never the reverse.

Families, each a package with a thin public face (its ``__init__``): :mod:`.backward`, :mod:`.causes`,
:mod:`.flow`, :mod:`.monitor`, :mod:`.nonfinite`, :mod:`.rerun`; single-module families :mod:`.gradcheck`;
and what every family may use: :mod:`.sandbox` (the one place user code is run and undone) and
:mod:`.sharded` (DTensor shards). Outside a family, only its face is imported; no private name crosses a
family boundary (``pyproject.toml`` and ``tests/unit/test_layers.py`` check both).
"""
