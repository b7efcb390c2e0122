"""The benchmarks behind ``gradpick bench*`` and the browser harness they share with the tests.

They sit above the library and the explorer (they time both), so nothing in the library imports
them. ``strategies``: what each way to picked gradients costs; ``inference``: folder inference,
stored outputs reopened and memory; ``explorer``: the app in a real browser (``serving``: its
server and page helpers; ``pages``: the waits and clicks in the page; ``views``: its phases
beyond the first clicks); ``distributed``: Ray Data against one process. ``process`` and ``rows``
are what they share: the ``/proc`` memory reader and the markdown table.
"""

from __future__ import annotations

__all__ = [
    "distributed",
    "explorer",
    "inference",
    "pages",
    "process",
    "rows",
    "serving",
    "strategies",
    "views",
]
