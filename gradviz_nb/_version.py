"""The package version, in its own module so no part of the package imports the namespace to read it."""

__version__ = "0.1.0"
