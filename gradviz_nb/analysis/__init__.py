"""Pure analyses of a traced graph (the data model) or of plain numbers: what-if, memory, diff, layer health.

Nothing here runs a model, installs a hook or reads ``.grad``; that is ``gradviz_nb.probes``.
"""
