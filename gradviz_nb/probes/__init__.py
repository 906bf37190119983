"""Live-model probes: they run the model, install hooks or read ``.grad`` (and restore what they touch).

Pure analyses of a traced graph live in ``gradviz_nb.analysis``; probes may use them, never the reverse.
"""
