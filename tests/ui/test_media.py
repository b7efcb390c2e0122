"""Images served by URL: a data URI outside a server, a stable media URL inside one."""

from __future__ import annotations

import base64

from streamlit.testing.v1 import AppTest

from gradpick.ui import media


def test_outside_a_server_the_image_is_a_data_uri_of_its_type() -> None:
    encoded = base64.b64encode(b"pixels").decode("ascii")
    assert media.image_url(b"pixels", "slot") == "data:image/png;base64," + encoded
    assert media.image_url(b"pixels", "slot", "image/jpeg") == "data:image/jpeg;base64," + encoded


def _two_sheets() -> None:
    import streamlit as st

    from gradpick.ui import media

    first = media.image_url(b"first sheet", "grid")
    st.text(first)
    st.text(media.image_url(b"first sheet", "grid"))
    st.text(media.image_url(b"second sheet", "grid"))


def test_in_a_server_the_same_image_keeps_its_url_and_another_gets_a_new_one() -> None:
    app = AppTest.from_function(_two_sheets, default_timeout=60).run()
    first, again, second = (element.value for element in app.text)
    assert "/media/" in first and first.endswith(".png")  # AppTest's storage adds /mock
    assert again == first
    assert second != first and "/media/" in second
    rerun = app.run()
    assert rerun.text[0].value == first


def test_urls_are_made_absolute_on_the_page_address_even_under_a_path() -> None:
    assert media.on_page("http://localhost:8501/", "/media/a.png") == (
        "http://localhost:8501/media/a.png"
    )
    assert media.on_page("https://demo.example/~/+", "/media/a.png") == (
        "https://demo.example/~/+/media/a.png"
    )
    assert media.on_page("https://demo.example/app/", "/media/a.png") == (
        "https://demo.example/app/media/a.png"
    )
