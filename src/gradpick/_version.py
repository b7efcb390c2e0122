"""The package's version: one leaf module that imports nothing, read by ``pyproject.toml`` (as
setuptools' dynamic version), by ``gradpick.__version__`` and by every record that names the
code it came from (stores, result files)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
