"""The explorer with a multi-label (sigmoid) model, through AppTest: a tiny random Hugging Face
ViT saved with ``problem_type: multi_label_classification``. Its confidences are each label's
own sigmoid, the label-and-threshold rule picks what the model's own forward says, and the
target selector picks a label whose maps are drawn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gradpick.data import CIFAR10_CLASSES
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.picking import rules as selection
from gradpick.ui import config, keys
from tests.app.test_app import index_box, no_errors, open_app, open_tab, select, table

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def multi_label_vit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny ViT of CIFAR-10's ten labels, scored independently (sigmoid)."""
    folder = tmp_path_factory.mktemp("multi-label-vit")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.ViTForImageClassification(
            transformers.ViTConfig(
                image_size=32,
                patch_size=8,
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=32,
                num_labels=10,
                id2label=dict(enumerate(CIFAR10_CLASSES)),
                label2id={name: i for i, name in enumerate(CIFAR10_CLASSES)},
                problem_type="multi_label_classification",
            )  # fmt: skip
        )
    model.save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture
def served(
    generated: Path, multi_label_vit: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(config.MODEL_ENV, f"hf:{multi_label_vit}")
    yield generated


def _probabilities(folder: Path, images: Path, names: list[str]) -> torch.Tensor:
    """Each label's sigmoid from the saved model's own processor and forward (not gradpick's)."""
    model = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    processor = transformers.ViTImageProcessor.from_pretrained(folder)
    pictures = [Image.open(images / "test" / name).convert("RGB") for name in names]
    with torch.no_grad():
        logits = model(**processor(pictures, return_tensors="pt")).logits
    return torch.sigmoid(logits)


def test_confidence_is_the_top_labels_own_sigmoid(served: Path, multi_label_vit: Path) -> None:
    app = open_app()
    no_errors(app)
    rows = table(app)
    expected = _probabilities(multi_label_vit, served, rows["name"].tolist())
    assert expected.sum(dim=1).sub(1).abs().min() > 0.5  # far from a softmax
    shown = torch.tensor(rows["confidence"].tolist(), dtype=torch.float32)
    torch.testing.assert_close(shown, expected.max(dim=1).values, atol=2e-3, rtol=0)
    assert rows["predicted"].tolist() == [CIFAR10_CLASSES[i] for i in expected.argmax(1)]
    # triage ranks exclusive classes: the tab says why it does not apply
    app = open_tab(app, "Triage")
    no_errors(app)
    assert any("independent labels (sigmoid, multi-label)" in info.value for info in app.info)
    # nor does the comparison of two models' exclusive classes: it says why
    app.session_state[keys.COMPARE_WITH] = "tutorial:random-seed0"
    app = open_tab(app, "Compare")
    assert not app.exception
    said = " ".join(error.value for error in app.error)
    assert "Compare compares exclusive classes by their softmax; the first model" in said


def test_the_label_and_threshold_rule_picks_what_the_models_forward_says(
    served: Path, multi_label_vit: Path
) -> None:
    app = open_app()
    rows = table(app)
    probabilities = _probabilities(multi_label_vit, served, rows["name"].tolist())
    label = 3
    column = probabilities[:, label].sort().values
    # a threshold halfway along the widest gap near the median: no image sits on it
    middle = len(column) // 2
    gaps = column[middle - 8 : middle + 8].diff()
    at = middle - 8 + int(gaps.argmax())
    threshold = round(float(column[at] + column[at + 1]) / 2, 4)
    expected = (probabilities[:, label] >= threshold).nonzero().flatten().tolist()
    assert 0 < len(expected) < len(rows)
    app = open_app(
        rule="label_threshold", rule_k=len(rows), rule_class=label, rule_threshold=threshold
    )
    assert app.number_input(key=keys.RULE_THRESHOLD).value == threshold
    next(button for button in app.button if button.label == "Pick").click().run()
    no_errors(app)
    assert index_box(app).value == selection.format_indices(expected)


def test_the_target_selector_picks_a_label_and_its_maps_are_drawn(served: Path) -> None:
    app = open_app(method="gradcam", target_mode="class", target_class=3)
    app = select(app, keys.SCATTER_CHART, [1, 4])
    no_errors(app)
    assert app.sidebar.selectbox(key=keys.TARGET_CLASS).label == "Label"
    assert "Logit of a chosen label" in app.sidebar.radio(key=keys.TARGET_MODE).options
    legends = [image.captions[0] for image in app.image if image.captions]
    assert any("logit[cat]" in legend for legend in legends)
    app.sidebar.radio(key=keys.TARGET_MODE).set_value("loss").run()
    no_errors(app)
    legends = [image.captions[0] for image in app.image if image.captions]
    assert any("bce[true label]" in legend for legend in legends)


def test_output_sigmoid_reads_any_model_as_multi_label(
    generated: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``-- --model tutorial --weights W --output sigmoid`` (through its environment fallback)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        state = models.build("tutorial").state_dict()
    weights = tmp_path / "tutorial.pt"
    torch.save(state, weights)
    monkeypatch.setenv(config.MODEL_ENV, "tutorial")
    monkeypatch.setenv(config.WEIGHTS_ENV, str(weights))
    monkeypatch.setenv(config.OUTPUT_ENV, "sigmoid")
    app = open_app()
    no_errors(app)
    rows = table(app)
    loaded = zoo.load_model("tutorial", weights)
    pixels = [  # the 32 x 32 files as they are: the model's input size
        torch.from_numpy(np.asarray(Image.open(generated / "test" / name).convert("RGB")))
        for name in rows["name"]
    ]
    with torch.no_grad():
        logits = loaded.module(torch.stack(pixels).permute(0, 3, 1, 2).float() / 255)
    own = 1 / (1 + torch.exp(-logits.double()))
    shown = torch.tensor(rows["confidence"].tolist(), dtype=torch.float64)
    torch.testing.assert_close(shown, own.max(dim=1).values, atol=1e-4, rtol=0)
    assert app.sidebar.radio(key=keys.TARGET_MODE).format_func("class") == (
        "Logit of a chosen label"
    )
