"""gradpick's own exceptions: each message says what went wrong and what the user can do.

They subclass the built-in type a caller would naturally catch (ValueError for bad input,
RuntimeError for an environment problem), so code that does not know gradpick still works.
"""

__all__ = [
    "ClusterError",
    "DataError",
    "DeviceMemoryError",
    "DeviceUnavailableError",
    "DownloadError",
    "GradpickError",
    "InputError",
    "MissingExtraError",
    "ModelError",
    "SampleCouplingError",
    "SelectionError",
]


class GradpickError(Exception):
    """Base class of every error gradpick raises on purpose."""


class InputError(GradpickError, ValueError):
    """Arguments that cannot be used as given (shapes, dtypes, NaNs, missing labels)."""


class SelectionError(InputError):
    """An empty, malformed or out-of-range index selection."""


class DataError(GradpickError, ValueError):
    """An image source that cannot be read: a missing folder, a corrupt or unsupported file."""


class DownloadError(DataError, RuntimeError):
    """A dataset download that failed, typically because the machine is offline."""


class ModelError(GradpickError, ValueError):
    """A model or weights file that cannot be used: unknown name, wrong architecture, corrupt."""


class DeviceUnavailableError(GradpickError, RuntimeError):
    """A device that was asked for but does not exist on this machine."""


class SampleCouplingError(GradpickError, RuntimeError):
    """A model whose outputs mix samples of a batch, so per-index gradients are not separable."""


class DeviceMemoryError(GradpickError, RuntimeError):
    """The device ran out of memory even after the work was split into the smallest chunks."""


class ClusterError(GradpickError, RuntimeError):
    """A Ray cluster that cannot be reached or used, or Ray itself missing."""


class MissingExtraError(GradpickError, ImportError):
    """An optional part of gradpick used without the extra that installs its packages."""
