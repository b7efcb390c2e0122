"""Images the browser fetches by URL instead of inside a chart's JSON.

A chart's figure travels whole on every rerun that changes it. The thumbnail grid's sheet (one
PNG of up to 200 thumbnails, about 250 kB, a third more as base64 text) would ride along with
every click that moves the picked outlines, to be parsed and decoded again by the browser.
Registered with Streamlit's media file manager instead, it is fetched once per page of
thumbnails under a URL that stays the same while the sheet does, so the browser keeps its copy
and plotly leaves the image alone.
"""

from __future__ import annotations

import base64
from urllib.parse import urljoin

import streamlit as st
from streamlit import runtime

__all__ = ["image_url", "on_page"]


def image_url(image: bytes, slot: str, mimetype: str = "image/png") -> str:
    """A URL the page can load ``image`` from, held for this session under ``slot`` (a new image
    in the same slot replaces the old one); a data URI where no Streamlit server runs.

    The URL is absolute, made from the page's own address: a relative one would be resolved
    against the page by ``st.image`` but taken as it is by plotly, which breaks behind a
    proxy that serves the app under a path.
    """
    if not runtime.exists():
        return f"data:{mimetype};base64," + base64.b64encode(image).decode("ascii")
    path = runtime.get_instance().media_file_mgr.add(image, mimetype, slot)
    page = st.context.url
    return on_page(page, path) if page else path


def on_page(page: str, path: str) -> str:
    """``path`` (``/media/...``) under the app's address ``page``, whose path may be a proxy's."""
    return urljoin(page if page.endswith("/") else page + "/", path.lstrip("/"))
