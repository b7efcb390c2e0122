"""The detailed view's values on hover: the bytes the script reads and the script's settings."""

from __future__ import annotations

import json

import numpy as np

from gradpick.ui.browser import pixels


def test_values_are_float32_planes_saliency_first_row_by_row() -> None:
    saliency = np.arange(6, dtype=np.float64).reshape(2, 3) / 8
    channels = -np.arange(18, dtype=np.float64).reshape(3, 2, 3)
    raw = pixels.values_bytes(saliency, channels)
    assert len(raw) == 4 * 2 * 3 * 4
    flat = np.frombuffer(raw, dtype="<f4")
    # Plane p, row r, column c sits at (p * H + r) * W + c, as the script reads it.
    assert flat[(0 * 2 + 1) * 3 + 2] == saliency[1, 2]
    assert flat[(3 * 2 + 0) * 3 + 1] == channels[2, 0, 1]
    assert flat[(1 * 2 + 1) * 3 + 0] == channels[0, 1, 0]


def test_the_script_names_the_picture_its_values_and_their_shape() -> None:
    html = pixels.script(".st-key-detail", "http://host/media/v.bin", (32, 24), 6)
    config = json.loads(html.split("const config = ", 1)[1].split(";\n", 1)[0])
    assert "white-space: nowrap" in config.pop("tipStyle")  # the label on one line
    assert config == {
        "image": ".st-key-detail",
        "values": "http://host/media/v.bin",
        "height": 32,
        "width": 24,
        "gap": 6,
        "panels": ["saliency", "red", "green", "blue"],
        "tip": pixels.TIP_ID,
    }
    assert html.startswith("<script>") and html.rstrip().endswith("</script>")
