"""One versioned JSON shape for every verdict gradviz_nb gives, for scripts, CI and agents.

Every record is a JSON object with ``schema_version`` (:data:`SCHEMA_VERSION`) and ``type`` (``"diagnosis"``,
``"finding"``, ``"why"``, ``"proof"``, ``"nonfinite"``, ``"flag"``, ``"stop"``, ``"checkpoint_plan"``), then the
type's fields. The JSON Schema is the file :data:`SCHEMA_PATH` (shipped in the wheel); ``to_json()`` on each
result type returns its record as JSON text, built here (:mod:`gradviz_nb.schema.records`), so the shapes live
in one place.

Sizes are bounded: long texts are cut at :data:`MAX_TEXT` characters and long lists at :data:`MAX_ITEMS` items
(with the full count beside them), so one answer to "why no gradient" or "where was the NaN born" stays under
2,000 tokens whatever the model.

Non-finite numbers (an input's ``max |x|`` of ``inf``, a norm that is NaN) are the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``: strict JSON has no literal for them.
"""

from gradviz_nb.schema.records import (
    MAX_ITEMS,
    MAX_TEXT,
    SCHEMA_PATH,
    SCHEMA_VERSION,
    TYPES,
    checkpoint_plan,
    diagnosis,
    dumps,
    finding,
    flag,
    load_schema,
    nonfinite,
    proof,
    stop,
    why,
)

__all__ = ["MAX_ITEMS", "MAX_TEXT", "SCHEMA_PATH", "SCHEMA_VERSION", "TYPES", "checkpoint_plan", "diagnosis",
           "dumps", "finding", "flag", "load_schema", "nonfinite", "proof", "stop", "why"]
