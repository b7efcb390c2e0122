"""Feature-space picking: PCA equals an independent SVD, colourings, cosine nearest neighbours."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gradpick import data
from gradpick.errors import InputError, SelectionError
from gradpick.models import shipped as models
from gradpick.outputs import stores as stored
from gradpick.outputs.inference import InferenceResult
from gradpick.picking import feature_space as embedding
from gradpick.ui import service


def _features(n: int = 40, d: int = 7, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # Unequal spreads per direction, so the principal axes are well separated.
    return torch.randn(n, d, generator=generator) * torch.linspace(3.0, 0.2, d) + 1.5


def _result(labels: list[int] | None, predictions: list[int], classes: int = 3) -> InferenceResult:
    logits = F.one_hot(torch.tensor(predictions), classes).float() * 4
    probabilities = logits.softmax(dim=1)
    confidences, predicted = probabilities.max(dim=1)
    label_tensor = None if labels is None else torch.tensor(labels)
    return InferenceResult(
        logits=logits,
        probabilities=probabilities,
        predictions=predicted,
        confidences=confidences,
        labels=label_tensor,
        losses=None,
        device="cpu",
        milliseconds=1.0,
    )


def test_pca_equals_the_projection_on_the_top_singular_vectors_up_to_sign() -> None:
    features = _features()
    points = embedding.pca(features)
    centred = features.double().numpy() - features.double().numpy().mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    expected = centred @ vt[:2].T
    assert points.shape == (40, 2) and points.dtype == np.float32
    for axis in range(2):
        sign = np.sign(points[:, axis] @ expected[:, axis])
        np.testing.assert_allclose(points[:, axis], sign * expected[:, axis], rtol=1e-5, atol=1e-5)
    assert points[:, 0].var() > points[:, 1].var()


@pytest.mark.parametrize(
    ("dtype", "tolerance"),
    [(torch.float64, 1e-6), (torch.float32, 1e-5), (torch.float16, 2e-2)],  # float32 returned
)
def test_pca_in_chunks_equals_the_svd_in_the_features_dtype(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, tolerance: float
) -> None:
    monkeypatch.setattr(embedding, "PCA_CHUNK_ROWS", 7)  # 40 rows: six chunks, one short
    features = _features(d=5).to(dtype)
    points = embedding.pca(features)
    values = features.double().numpy()
    centred = values - values.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    expected = centred @ vt[:2].T
    assert points.dtype == np.float32
    for axis in range(2):
        sign = np.sign(points[:, axis] @ expected[:, axis])
        np.testing.assert_allclose(
            points[:, axis], sign * expected[:, axis], rtol=tolerance, atol=tolerance
        )


def test_pca_is_deterministic_and_fixes_each_axis_sign() -> None:
    features = _features()
    first = embedding.project(features)
    assert np.array_equal(first, embedding.project(features.clone()))
    # The same cloud shifted: PCA centres it, so the picture is the same.
    np.testing.assert_allclose(embedding.project(features + 10), first, atol=1e-4)


def test_pca_of_one_direction_or_one_feature_has_a_zero_second_axis() -> None:
    line = torch.arange(6, dtype=torch.float32)[:, None] * torch.tensor([[1.0, 2.0, 0.0]])
    points = embedding.pca(line)
    np.testing.assert_allclose(points[:, 1], 0, atol=1e-5)
    assert np.ptp(points[:, 0]) > 0
    single = embedding.pca(torch.arange(4, dtype=torch.float32)[:, None])
    assert single.shape == (4, 2) and not single[:, 1].any()


@pytest.mark.parametrize(
    ("features", "message"),
    [
        (torch.ones(3), "\\[N, D\\]"),
        (torch.ones(0, 4), "no features"),
        (torch.tensor([[1.0, float("nan")]]), "NaN"),
    ],
)
def test_bad_features_are_refused(features: torch.Tensor, message: str) -> None:
    with pytest.raises(InputError, match=message):
        embedding.project(features)


def test_an_unknown_projection_is_refused() -> None:
    with pytest.raises(InputError, match="Unknown projection 'tsne'"):
        embedding.project(_features(), "tsne")


class _FakeUMAP:
    """Stands in for umap.UMAP (whose first call compiles for a minute): records its settings
    and returns the first two feature columns."""

    made: list[dict[str, object]] = []

    def __init__(self, **settings: object) -> None:
        self.made.append(settings)

    def fit_transform(self, values: np.ndarray) -> np.ndarray:
        return values[:, :2].astype(np.float64)


def test_umap_is_seeded_with_cosine_distances(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("umap")
    fake.UMAP = _FakeUMAP  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "umap", fake)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    features = _features(n=30)
    points = embedding.project(features, "umap", seed=4)
    assert points.dtype == np.float32 and points.shape == (30, 2)
    np.testing.assert_allclose(points, features[:, :2].numpy(), rtol=1e-6)
    assert _FakeUMAP.made[-1] == {
        "n_components": 2,
        "n_neighbors": 15,
        "metric": "cosine",
        "random_state": 4,
        "n_jobs": 1,
    }
    assert embedding.available_projections() == ("pca", "umap")


def test_umap_without_umap_learn_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert embedding.available_projections() == ("pca",)
    with pytest.raises(InputError, match="gradpick\\[umap\\]"):
        embedding.project(_features(), "umap")


@pytest.mark.skipif(
    importlib.util.find_spec("umap") is None,
    reason="umap-learn is not installed (the test extra brings it: pip install -e '.[test]')",
)
def test_real_umap_gives_finite_seeded_points() -> None:
    """30 points: UMAP's exact-neighbour path, whose numba compile is what this costs (about
    36 CPU-seconds in a fresh environment, 16 once numba keeps the kernels it caches)."""
    features = _features(n=30)
    threads = torch.get_num_threads()
    points = embedding.project(features, "umap", seed=1)
    assert points.shape == (30, 2) and np.isfinite(points).all()
    assert np.array_equal(points, embedding.project(features, "umap", seed=1))
    # numba's parallel steps set the OpenMP count torch reads; the projection puts it back.
    assert torch.get_num_threads() == threads


def test_colour_groups_by_true_predicted_and_correctness() -> None:
    result = _result(labels=[0, 1, 2, 2], predictions=[0, 2, 2, 1])
    groups, names = embedding.colour_groups(result, "true", ("a", "b", "c"))
    assert groups.tolist() == [0, 1, 2, 2] and names == ("a", "b", "c")
    groups, names = embedding.colour_groups(result, "predicted")
    assert groups.tolist() == [0, 2, 2, 1] and names == ("class 0", "class 1", "class 2")
    groups, names = embedding.colour_groups(result, "correct")
    assert groups.tolist() == [0, 1, 0, 1] and names == ("right", "wrong")


def test_colouring_by_labels_without_labels_says_so() -> None:
    result = _result(labels=None, predictions=[0, 1])
    assert embedding.colour_groups(result, "predicted")[0].tolist() == [0, 1]
    for by in ("true", "correct"):
        with pytest.raises(InputError, match="needs the true labels"):
            embedding.colour_groups(result, by)
    with pytest.raises(InputError, match="Unknown colouring"):
        embedding.colour_groups(result, "loss")


def _brute_force_neighbours(features: torch.Tensor, anchor: int, k: int) -> list[int]:
    """Cosine similarity one pair at a time, in float64, sorted by (-similarity, index)."""
    rows = features.double()
    scored = []
    for index in range(len(rows)):
        a, b = rows[anchor], rows[index]
        norms = float(a.norm() * b.norm())
        similarity = float(a @ b) / norms if norms > 0 else 0.0
        scored.append((-(2.0 if index == anchor else similarity), index))
    return [index for _, index in sorted(scored)[:k]]


@pytest.mark.parametrize(("anchor", "k"), [(0, 1), (5, 6), (39, 40), (17, 60)])
def test_nearest_neighbours_equal_a_brute_force_cosine_ranking(anchor: int, k: int) -> None:
    features = _features()
    found = embedding.nearest_neighbours(features, anchor, k)
    assert found == _brute_force_neighbours(features, anchor, k)
    assert found[0] == anchor and len(found) == min(k, 40)


def test_nearest_neighbours_use_directions_not_lengths() -> None:
    features = torch.tensor([[1.0, 0.0], [10.0, 0.5], [0.0, 1.0], [0.0, 0.0], [-1.0, 0.1]])
    # Row 3 is zero (no direction, similarity 0): it ties with the orthogonal row 2.
    assert embedding.nearest_neighbours(features, 0, 5) == [0, 1, 2, 3, 4]


def test_nearest_neighbours_refuse_bad_anchors_and_k() -> None:
    with pytest.raises(SelectionError, match="valid indices are 0 to 39"):
        embedding.nearest_neighbours(_features(), 40, 3)
    with pytest.raises(SelectionError, match="at least 1"):
        embedding.nearest_neighbours(_features(), 0, 0)


def test_a_stores_projection_is_kept_beside_it_and_read_back_without_its_embeddings(
    image_folder_factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first projection of a store's rows is written beside the store; a later opening of
    the same rows reads it without reading the embeddings; other rows or a store written again
    are projected again. The kept points equal PCA of the stored embeddings."""
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path / "no-assets"))
    model = service.load_model(service.ModelOption("tutorial"), torch.device("cpu"))
    source = data.image_folder(image_folder_factory(list(data.CIFAR10_CLASSES), per_class=2))
    out = tmp_path / "store"
    stored.infer_to_store(model, source, range(len(source)), out, embeddings=True)
    batch = data.load_batch(source, size=12, seed=3)

    def lazy(rows: data.ImageBatch = batch) -> InferenceResult:
        return stored.stored_result(stored.open_stored(str(out), stored.OUTPUT_COLUMNS), rows)

    first = lazy()
    points = embedding.projected(first, "pca")
    kept = tmp_path / "store.projection-pca.npz"
    assert kept.is_file() and not list(tmp_path.glob("*.partial*"))
    whole = stored.stored_result(stored.open_stored(str(out)), batch)  # embeddings read now
    assert whole.features is not None and not isinstance(whole, stored.StoredResult)
    np.testing.assert_array_equal(points, embedding.pca(whole.features))
    projections: list[str] = []
    project = embedding.project
    monkeypatch.setattr(
        embedding, "project", lambda *a, **k: projections.append(a[1]) or project(*a, **k)
    )
    second = lazy()
    np.testing.assert_array_equal(embedding.projected(second, "pca"), points)
    assert projections == [] and "not read yet" in repr(second)
    embedding.projected(lazy(data.load_batch(source, size=12, seed=4)), "pca")
    assert projections == ["pca"]
    stored.infer_to_store(model, source, range(len(source)), out, embeddings=True)
    embedding.projected(lazy(), "pca")
    assert projections == ["pca", "pca"]
    # outputs held in memory are projected as they are, and nothing is written
    np.testing.assert_array_equal(embedding.projected(whole, "pca"), points)
    with pytest.raises(InputError, match="Unknown projection"):
        embedding.projected(first, "tsne")
