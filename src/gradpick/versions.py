"""Library versions, recorded beside every result file so a number can be traced to its code."""

from __future__ import annotations

import platform

import numpy
import torch
import torchvision

import gradpick


def library_versions() -> dict[str, str]:
    return {
        "gradpick": gradpick.__version__,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }
