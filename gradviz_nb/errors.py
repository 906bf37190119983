"""The one exception type gradviz_nb raises for user-facing problems."""


class GradvizError(ValueError):
    """Raised for bad input or unsupported situations; the message says what to do."""
