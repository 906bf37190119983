"""Share a traced graph: one self-contained HTML page (``html``), SVG/PNG images (``image``),
JSON / GraphML / DOT data (``data``)."""
