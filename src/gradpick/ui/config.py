"""What the explorer lets a visitor do, decided once per process from the environment.

A hosted deployment (issue 5) narrows what a visitor may touch on the server; everything that
depends on it reads this object instead of checking the environment itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

HOSTED_ENV = "GRADPICK_HOSTED"


@dataclass(frozen=True)
class AppConfig:
    """Switches the page consults; the defaults are for a local, single-user run."""

    hosted: bool = False

    @property
    def allow_local_folder(self) -> bool:
        """A visitor of a hosted demo must not read the server's file system."""
        return not self.hosted


def app_config() -> AppConfig:
    """The configuration of this process: ``$GRADPICK_HOSTED=1`` turns hosted mode on."""
    return AppConfig(hosted=os.environ.get(HOSTED_ENV, "").lower() in ("1", "true", "yes"))
