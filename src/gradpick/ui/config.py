"""What the explorer lets a visitor do, decided once per run from the environment and argv.

A hosted deployment narrows what a visitor may touch on the server; everything that
depends on it reads this object instead of checking the environment itself. A local run may
name any model ``gradpick.models.zoo.load_model`` takes, with its weights and input spec:
``streamlit run app.py -- --model torchvision:resnet18 --weights w.pt --input-size 224``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradpick.errors import InputError
from gradpick.models.zoo import OUTPUT_KINDS
from gradpick.units import MB

__all__ = [
    "CLASSES_ENV",
    "OUTPUT_ENV",
    "CLOUD_ROOT",
    "HOSTED_ENV",
    "HOSTED_MAX_BATCH_SIZE",
    "HOSTED_MAX_IMAGE_BYTES",
    "HOSTED_MAX_UPLOAD_FILES",
    "MAX_WEIGHTS_BYTES",
    "MODEL_ENV",
    "WEIGHTS_ENV",
    "app_config",
    "AppConfig",
    "hosted_mode",
    "parse_outputs",
    "parse_user_model",
    "UserModelArgs",
]

HOSTED_ENV = "GRADPICK_HOSTED"
MODEL_ENV = "GRADPICK_MODEL"
WEIGHTS_ENV = "GRADPICK_WEIGHTS"
CLASSES_ENV = "GRADPICK_CLASSES"
OUTPUT_ENV = "GRADPICK_OUTPUT"
CLOUD_ROOT = Path("/mount/src")
"""Streamlit Community Cloud runs every app from /mount/src/<repository>."""

HOSTED_MAX_UPLOAD_FILES = 64
HOSTED_MAX_IMAGE_BYTES = 5 * MB
HOSTED_MAX_BATCH_SIZE = 2000
MAX_WEIGHTS_BYTES = 50 * MB
"""Far above ResNet-20's 1 MB: a bigger file is not weights for a built-in architecture."""


@dataclass(frozen=True)
class UserModelArgs:
    """The user's own model as named on the command line (or its environment fallback)."""

    factory: str
    """Any model name: torchvision:NAME[:WEIGHTS], timm:NAME, package.module:factory."""
    weights: str | None = None
    classes: str | None = None
    input_size: str | None = None
    resize: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    output: str | None = None
    """``sigmoid`` for independent labels (multi-label), ``softmax``; None: the model's own."""


@dataclass(frozen=True)
class AppConfig:
    """Switches the page consults; the defaults are for a local, single-user run."""

    hosted: bool = False
    user_model: UserModelArgs | None = None
    problem: str | None = None
    """Why the command line could not be read, for the page to show."""
    outputs: str | None = None
    """``--outputs DIR``: stored outputs to open first (local runs only)."""

    @property
    def allow_local_folder(self) -> bool:
        """A visitor of a hosted demo must not read the server's file system."""
        return not self.hosted

    @property
    def allow_user_model(self) -> bool:
        """Importing a model by name runs its code: only the person running the server may."""
        return not self.hosted

    @property
    def max_upload_files(self) -> int | None:
        return HOSTED_MAX_UPLOAD_FILES if self.hosted else None

    @property
    def max_image_bytes(self) -> int | None:
        """Checked by the page itself: Streamlit's maxUploadSize is a deploy setting only."""
        return HOSTED_MAX_IMAGE_BYTES if self.hosted else None

    @property
    def max_batch_size(self) -> int | None:
        """Inference holds the whole batch's outputs: a cap protects a small host's memory."""
        return HOSTED_MAX_BATCH_SIZE if self.hosted else None


def hosted_mode(setting: str | None, cwd: Path) -> bool:
    """``$GRADPICK_HOSTED`` decides when set (1/true/yes on, anything else off); unset, a
    process running from Streamlit Community Cloud's /mount/src is hosted."""
    if setting is not None and setting.strip():
        return setting.strip().lower() in ("1", "true", "yes")
    return cwd == CLOUD_ROOT or CLOUD_ROOT in cwd.parents


def parse_user_model(argv: Sequence[str], env: Mapping[str, str]) -> UserModelArgs | None:
    """``--model/--weights/--classes/--output`` from the script's argv, unknown arguments
    ignored; each falls back to ``$GRADPICK_MODEL/_WEIGHTS/_CLASSES/_OUTPUT`` (how tests and
    services set them). ``--input-size/--resize/--mean/--std`` set the model's input spec, and
    ``--output sigmoid`` reads it as a multi-label model, as in the CLI."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--model")
    parser.add_argument("--weights")
    parser.add_argument("--classes")
    parser.add_argument("--input-size")
    parser.add_argument("--resize", type=int)
    parser.add_argument("--mean", nargs="+", type=float)
    parser.add_argument("--std", nargs="+", type=float)
    parser.add_argument("--output", choices=OUTPUT_KINDS)
    try:
        known, _ = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as error:
        raise InputError(
            f"The command line: {error}. Use -- --model package.module:factory (or "
            "torchvision:NAME[:WEIGHTS], timm:NAME) [--weights file.pt|.safetensors] "
            "[--classes names.txt] [--input-size S|HxW] [--resize R] [--mean M M M] "
            "[--std S S S] [--output softmax|sigmoid]."
        ) from None
    factory = known.model or env.get(MODEL_ENV)
    if not factory:
        return None
    return UserModelArgs(
        factory=factory,
        weights=known.weights or env.get(WEIGHTS_ENV) or None,
        classes=known.classes or env.get(CLASSES_ENV) or None,
        input_size=known.input_size,
        resize=known.resize,
        mean=None if known.mean is None else tuple(known.mean),
        std=None if known.std is None else tuple(known.std),
        output=known.output or env.get(OUTPUT_ENV) or None,
    )


def parse_outputs(argv: Sequence[str]) -> str | None:
    """``--outputs DIR`` from the script's argv: a store to open (``gradpick infer --out``)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--outputs")
    try:
        known, _ = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as error:
        raise InputError(f"The command line: {error}. Use -- --outputs DIR.") from None
    return known.outputs or None


def app_config() -> AppConfig:
    """The configuration of this run, from the environment, the working folder and argv."""
    hosted = hosted_mode(os.environ.get(HOSTED_ENV), Path.cwd())
    try:
        outputs = parse_outputs(sys.argv[1:])
        return AppConfig(hosted, parse_user_model(sys.argv[1:], os.environ), outputs=outputs)
    except InputError as error:
        return AppConfig(hosted, problem=str(error))
