"""In the browser: a Hugging Face ViT saved with its processor, served as ``--model hf:DIR``
offline, Grad-CAM at the family's layer (the last block's input norm, the class token dropped)
drawn over scikit-image's photos stretched to the processor's 224 x 224. The screenshot goes to
``artifacts/e2e-hf-gradcam.png``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gradpick.ui import keys
from tests.serving import (
    explorer_server,
    maps_of_the_first_four,
    open_explorer,
    open_local_folder,
    page_errors,
    photo_folder,
    screenshot,
)

transformers = pytest.importorskip("transformers")

HEATMAPS = keys.selector(keys.HEATMAPS_CONTAINER)


def _maps(page: Any) -> dict[str, float]:
    """The maps with their caption above, for the screenshot."""
    shown = page.locator(HEATMAPS).bounding_box()
    return {"x": 0, "y": max(0, shown["y"] - 80), "width": 1500, "height": shown["height"] + 92}


def test_gradcam_of_a_hugging_face_vit_in_the_explorer(
    browser: Any,
    tmp_path: Path,
    cifar_like_factory: Callable[[int], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    config = transformers.ViTConfig(
        image_size=224, patch_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=2,
        id2label={0: "scene", 1: "still"},
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.ViTForImageClassification(config)
    model.save_pretrained(tmp_path / "vit")
    transformers.ViTImageProcessor(size={"height": 224, "width": 224}).save_pretrained(
        tmp_path / "vit"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = photo_folder(tmp_path / "photos")
    served = explorer_server(
        cifar_like_factory(3), tmp_path / "cache", "e2e-hf-server", model=f"hf:{tmp_path / 'vit'}"
    )
    with served as running:
        page = open_explorer(browser, running.url)
        open_local_folder(page, folder, 4)
        maps_of_the_first_four(page, "Grad-CAM")
        page.get_by_text(
            "Grad-CAM at layer model.vit.layers.1.layernorm_before (14 × 14"
        ).wait_for()
        assert page_errors(page).count() == 0
        enlarged = {"width": 1500, "height": 2400}
        screenshot(page, "hf-gradcam", size=enlarged, settle_ms=1500, clip=_maps)
        page.context.close()
