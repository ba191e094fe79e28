"""The package version, in a module of its own so that modules of the package can name it
without importing the package root (which is no layer: it only re-exports the public names)."""

#: Kept equal to ``version`` in pyproject.toml.
__version__ = "0.1.0"
