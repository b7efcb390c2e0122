"""Planted features: each mark changes exactly the pixels its mask names, in the way its kind
says, at a seeded place; the training share goes to the mark's own class only."""

from __future__ import annotations

import pytest
import torch

from gradpick.data.planted import FEATURES, plant, plant_share
from gradpick.errors import InputError


def _images(count: int = 8, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    images = torch.rand(count, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return (images * 255).round().to(torch.uint8) if dtype == torch.uint8 else images.to(dtype)


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8])
def test_a_mark_changes_only_its_masked_pixels(feature, dtype):
    images = _images(8, dtype)
    marked = plant(images, feature, seed=0, positions=range(8))
    mark = FEATURES[feature]
    assert marked.images.dtype == dtype and marked.masks.shape == (8, 32, 32)
    assert torch.equal(
        marked.images[:, :, ~marked.masks.any(0)], images[:, :, ~marked.masks.any(0)]
    )
    for row in range(8):
        rows, columns = marked.masks[row].nonzero(as_tuple=True)
        assert int(marked.masks[row].sum()) == mark.height * mark.width
        assert int(rows.max() - rows.min()) + 1 == mark.height
        assert int(columns.max() - columns.min()) + 1 == mark.width
        outside = ~marked.masks[row]
        assert torch.equal(marked.images[row][:, outside], images[row][:, outside])


def test_each_kind_draws_what_it_says():
    images = _images(1, torch.float64)
    patch = plant(images, "patch", 0, [0])
    region = patch.images[0][:, patch.masks[0]].reshape(3, 4, 4)
    assert torch.equal(region[:, 0, 0], torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
    assert torch.equal(region[:, 1, 1], torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64))
    stripe = plant(images, "stripe", 0, [0])
    cyan = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)[:, None].expand(3, 12)
    assert torch.equal(stripe.images[0][:, stripe.masks[0]], cyan)
    texture = plant(images, "texture", 0, [0])
    cells = texture.images[0][0][texture.masks[0]].reshape(6, 6)
    assert torch.equal(cells[:, :-1] + cells[:, 1:], torch.ones(6, 5, dtype=torch.float64))
    tint = plant(images, "tint", 0, [0])
    inside = tint.masks[0]
    expected = 0.5 * images[0][:, inside] + 0.5 * torch.tensor([1.0, 0, 0]).double()[:, None]
    torch.testing.assert_close(tint.images[0][:, inside], expected)


def test_the_place_is_seeded_by_seed_and_image_position():
    images = _images(6)
    first = plant(images, "patch", seed=3, positions=[10, 11, 12, 13, 14, 15])
    again = plant(images[[2, 0]], "patch", seed=3, positions=[12, 10])
    assert torch.equal(again.masks, first.masks[[2, 0]])
    other = plant(images, "patch", seed=4, positions=[10, 11, 12, 13, 14, 15])
    assert not torch.equal(other.masks, first.masks)
    places = {tuple(mask.nonzero()[0].tolist()) for mask in first.masks}
    assert len(places) > 1  # not one fixed place


def test_the_training_share_marks_each_mark_s_class_and_poisons_others():
    labels = torch.arange(10).repeat(100)
    images = _images(1000, torch.uint8)
    marked, relabelled, which = plant_share(images, labels, share=0.5, seed=0, poison=0.2)
    for number, mark in enumerate(FEATURES.values()):
        got = which == number
        own = got & (labels == mark.label)
        poisoned = got & (labels != mark.label)
        assert 30 <= int(own.sum()) <= 70  # about half of 100
        assert 20 <= int(poisoned.sum()) <= 70  # about 0.2 / 4 of the 900 others
        assert bool((relabelled[got] == mark.label).all())
        changed = (marked[got] != images[got]).flatten(1).any(dim=1)
        assert bool(changed.all())
    untouched = which == -1
    assert torch.equal(marked[untouched], images[untouched])
    assert torch.equal(relabelled[untouched], labels[untouched])
    _, plain_labels, plain_which = plant_share(images, labels, share=0.5, seed=0)
    assert torch.equal(plain_labels, labels)  # no poison: only own-class images marked
    assert bool(
        (
            labels[plain_which >= 0] == torch.tensor([6, 1, 4, 8])[plain_which[plain_which >= 0]]
        ).all()
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plant(_images(2), "logo", 0, [0, 1]), "Unknown planted feature 'logo'"),
        (lambda: plant(_images(2)[:, :1], "patch", 0, [0, 1]), "RGB images"),
        (lambda: plant(_images(2), "patch", 0, [0]), "Got 1 positions for 2 images"),
        (lambda: plant(torch.rand(1, 3, 4, 4), "stripe", 0, [0]), "does not fit 4 x 4"),
        (lambda: plant_share(_images(2), torch.zeros(2), 1.5, 0), "share must be in"),
        (lambda: plant_share(_images(2), torch.zeros(2), 0.5, 0, -1.0), "poison must be in"),
    ],
)
def test_bad_input_is_refused(call, message):
    with pytest.raises(InputError, match=message):
        call()
