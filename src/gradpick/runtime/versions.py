"""Library versions, recorded beside every result file so a number can be traced to its code."""

from __future__ import annotations

import platform
from importlib import metadata

import numpy
import torch

from gradpick._version import __version__

__all__ = [
    "installed_version",
    "library_versions",
]


def installed_version(package: str) -> str:
    """A package's version from its metadata, without importing it (torchvision's import alone
    costs a server memory); "not installed" where it is absent."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def library_versions() -> dict[str, str]:
    return {
        "gradpick": __version__,
        "torch": torch.__version__,
        "torchvision": installed_version("torchvision"),
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }
