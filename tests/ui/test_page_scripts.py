"""The frame of the page scripts: the settings as JSON, then the shared label helpers, then the
script's own body, inside one function run at once."""

from __future__ import annotations

import json

from gradpick.ui.browser.frame import page_script


def test_the_settings_the_helpers_and_the_body_come_in_order() -> None:
    config = {"tip": "a-label", "tipStyle": "color: red;", "quote": "it's </b>"}
    html = page_script("  window.ran = config.tip;", config)
    assert html.startswith("<script>\n(() => {\n") and html.endswith("})();\n</script>")
    given = html.split("const config = ", 1)[1].split(";\n", 1)[0]
    assert json.loads(given) == config
    positions = [
        html.index(part)
        for part in (
            "const config = ",
            "const page = window.parent.document;",
            "const tip = () =>",
            "const hide = () =>",
            "  window.ran = config.tip;",
        )
    ]
    assert positions == sorted(positions)
    assert "__CONFIG__" not in html and "__BODY__" not in html


def test_the_label_is_fixed_hidden_and_takes_no_pointer_events_whatever_its_style() -> None:
    html = page_script("", {"tip": "t", "tipStyle": "display: block;"})
    # CSS keeps the last of two declarations: the fixed ones come after the script's style.
    assert (
        "config.tipStyle\n        + ' position: fixed; z-index: 1000; pointer-events: none; "
        "display: none;'"
    ) in html
