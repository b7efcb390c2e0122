"""``gradpick layers``: the layers a layer method (Grad-CAM, ...) can use, with their shapes.

One forward of a zero image at the model's input size (``gradpick.gradients.layers.probe``)
lists every module whose output is a spatial map, in the order the forward ends them, and marks
the one ``--layer`` defaults to.
"""

from __future__ import annotations

import argparse

from gradpick.cli.arguments import Commands, add_model_arguments, load_model
from gradpick.gradients import layers

__all__ = ["register", "table"]


def table(found: layers.Probe) -> list[str]:
    """One line per spatial layer: its name, its output per image as the module returns it,
    the [C, h, w] map it gives, and '(automatic)' beside the default."""
    width = max((len(layer.name) for layer in found.layers), default=5)
    lines = [f"{'layer':<{width}}  {'output':<16}  map C x h x w"]
    for layer in found.layers:
        shape = "x".join(str(side) for side in layer.shape)
        grid = f"{layer.layout.channels}x{layer.layout.grid[0]}x{layer.layout.grid[1]}"
        mark = "  (automatic)" if layer.name == found.automatic else ""
        lines.append(f"{layer.name:<{width}}  {shape:<16}  {grid:<16}{mark}".rstrip())
    return lines


def _cmd_layers(args: argparse.Namespace) -> int:
    loaded = load_model(args)
    size = loaded.spec.size
    found = layers.probe(loaded.module, size)
    print(f"model: {loaded.describe()}")
    if not found.layers:
        print("no layer with a spatial output: the layer methods cannot run on this model")
        return 0
    print(f"{len(found.layers)} spatial layers at {size[0]}x{size[1]}:")
    print("\n".join(table(found)))
    print(f"--layer defaults to {found.automatic}")
    return 0


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "layers",
        help="the layers a layer method can use (--layer), with their output shapes",
        description="List every layer of the model whose output is a spatial map, at the "
        "model's input size, with its output shape, and mark the one --layer defaults to "
        "(the last before the global pooling for a CNN; the last block's attention input for "
        "a vision transformer).",
    )
    add_model_arguments(parser)
    parser.set_defaults(handler=_cmd_layers)
