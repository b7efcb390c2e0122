"""Image sources: moved into this package, split along its sections next."""

from gradpick.data.sources import *  # noqa: F403
