"""What the commands share: the data, batch and model arguments, the source they name, the
argument types and the progress lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

from gradpick import attribution, data, units
from gradpick.errors import InputError
from gradpick.gradients import strategies
from gradpick.gradients.engine import TARGETS
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.models.spec import RESIZE_MODES, InputSpec
from gradpick.models.zoo import LoadedModel, SpecOverrides, given_overrides
from gradpick.outputs.inference import fit_classes, labels_fit, output_names
from gradpick.runtime.devices import DEVICE_CHOICES

__all__ = [
    "MODEL_HELP",
    "Commands",
    "Handler",
    "add_batch_arguments",
    "add_data_arguments",
    "add_method_arguments",
    "add_model_arguments",
    "batch_description",
    "bounded",
    "class_argument",
    "fitted_to_model",
    "fraction",
    "load_model",
    "method_of",
    "load_models",
    "output_class_names",
    "own_names",
    "positive_int",
    "reading_progress",
    "data_source",
    "spec_overrides",
    "step_progress",
]

Handler = Callable[[argparse.Namespace], int]
Commands = argparse._SubParsersAction
"""What each command module's ``register`` adds its subparser to."""


def data_source(
    location: str | None, split: str, spec: InputSpec = data.DEFAULT_SPEC
) -> data.ImageSource:
    """A local path when given, else the default CIFAR-10 (configured folder or download)."""
    if location:
        return data.open_source(location, split, spec)
    return data.default_cifar10(split, progress=_download_progress, spec=spec)


def _download_progress(done: int, total: int) -> None:
    share = f"{done / total:.0%}" if total else units.format_bytes(done, digits=0)
    sys.stderr.write(f"\rdownloading CIFAR-10: {share}")
    if total and done >= total:
        sys.stderr.write("\n")


def step_progress(label: str, stream: TextIO | None = None) -> Callable[[int, int], None]:
    """A printer of "LABEL: done of total": on a terminal each step overwrites the last
    (``\\r``); in a log or a pipe, where ``\\r`` would run the steps together, one line each."""

    def progress(done: int, total: int) -> None:
        out = stream or sys.stderr
        if out.isatty():
            out.write(f"\r{label}: {done:,} of {total:,}" + ("\n" if done >= total else ""))
        else:
            out.write(f"{label}: {done:,} of {total:,}\n")
        out.flush()

    return progress


def reading_progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rreading images: {done:,} of {total:,}")
    if done >= total:
        sys.stderr.write("\n")


def add_data_arguments(parser: argparse.ArgumentParser, split: str) -> None:
    parser.add_argument(
        "--data",
        help="a local folder: ImageFolder layout, a folder with train/ and test/, or "
        "cifar-10-batches-py (default: $GRADPICK_CIFAR10_DIR, else torchvision's download)",
    )
    parser.add_argument("--split", default=split, choices=("train", "test"))


def bounded(
    convert: Callable[[str], Any], low: float, high: float | None = None, unit: str = ""
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text (int or float), refusing values outside the bounds."""
    kind = "a whole number" if convert is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {kind}") from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}{unit}, got {value}")
        return value

    return parse


positive_int = bounded(int, 1)
fraction = bounded(float, 0, 1)


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser, "test")
    parser.add_argument("--start", type=int, default=0, help="first image of the batch")
    parser.add_argument("--size", type=int, help="number of images (default: all)")
    parser.add_argument(
        "--seed", type=int, help="take a seeded random sample of --size images instead of a slice"
    )


MODEL_HELP = (
    "resnet20 or tutorial (shipped), torchvision:NAME[:WEIGHTS] (e.g. torchvision:resnet18:"
    "IMAGENET1K_V1), timm:NAME, hf:DIR_OR_HUB_NAME (a Hugging Face classifier) or "
    "package.module:factory (default: the best shipped model)"
)


class _NewModel(argparse.Action):
    """``--model`` of a command that takes several: each starts a model of its own."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        namespace.models = [*(getattr(namespace, "models", None) or []), {"model": values}]


class _ForModel(argparse.Action):
    """A model flag of a command that takes several: it belongs to the ``--model`` before it."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None
    ) -> None:
        chosen = getattr(namespace, "models", None)
        if not chosen:
            parser.error(f"{option} belongs to a model: give it after that model's --model")
        chosen[-1][self.dest] = values


def add_model_arguments(
    parser: argparse.ArgumentParser, positional: bool = False, per_model: bool = False
) -> None:
    """The model, its weights, device and input spec. ``per_model``: ``--model`` may be given
    more than once, each followed by its own ``--weights`` and spec flags (``load_models``)."""
    own: dict[str, Any] = {"action": _ForModel, "default": None} if per_model else {}
    if positional:
        parser.add_argument("model", help=MODEL_HELP)
    elif per_model:
        parser.add_argument("--model", action=_NewModel, dest="models", default=[], help=MODEL_HELP)
    else:
        parser.add_argument("--model", help=MODEL_HELP)
    parser.add_argument(
        "--weights",
        **own,
        help="a state_dict file, .pt/.pth (read with weights_only) or .safetensors "
        "(default: the shipped weights; random weights for torchvision and timm)",
    )
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    spec = parser.add_argument_group("input spec (set or override what the model's metadata says)")
    spec.add_argument(
        "--input-size", metavar="S|HxW", help="model input size, e.g. 224 or 224x160", **own
    )
    spec.add_argument(
        "--resize",
        type=int,
        metavar="R",
        help="shorter side before the centre crop (default: the input height, or the weights' "
        "own recipe)",
        **own,
    )
    spec.add_argument(
        "--mean", nargs="+", type=float, metavar="M", help="per-channel mean (3)", **own
    )
    spec.add_argument(
        "--std", nargs="+", type=float, metavar="S", help="per-channel std (3)", **own
    )
    spec.add_argument(
        "--resize-mode",
        choices=RESIZE_MODES,
        help="crop: shorter side then centre crop (the default); warp: stretch to the input "
        "size, as Hugging Face's ViT processor does",
        **own,
    )
    spec.add_argument(
        "--output",
        choices=zoo.OUTPUT_KINDS,
        help="softmax: exclusive classes (the default); sigmoid: independent labels of a "
        "multi-label model (read from a Hugging Face config's problem_type)",
        **own,
    )


def load_model(args: argparse.Namespace) -> LoadedModel:
    name = args.model or (models.shipped_models() or list(models.ARCHITECTURES))[0]
    return zoo.load_model(name, args.weights, args.device, **spec_overrides(args))


def load_models(args: argparse.Namespace, count: int) -> list[LoadedModel]:
    """The ``count`` models of a ``per_model`` command, each with its own weights and spec."""
    chosen: list[dict[str, Any]] = args.models or []
    if len(chosen) != count:
        raise InputError(
            f"Give {count} models (--model NAME [--weights FILE], once for each); got "
            f"{len(chosen)}."
        )
    return [
        zoo.load_model(
            flags["model"],
            flags.get("weights"),
            args.device,
            **given_overrides(
                flags.get("input_size"),
                flags.get("resize"),
                flags.get("mean"),
                flags.get("std"),
                resize_mode=flags.get("resize_mode"),
                output=flags.get("output"),
            ),
        )
        for flags in chosen
    ]


def spec_overrides(args: argparse.Namespace) -> SpecOverrides:
    """The input-spec flags that were given."""
    return given_overrides(
        args.input_size,
        args.resize,
        args.mean,
        args.std,
        resize_mode=getattr(args, "resize_mode", None),
        output=getattr(args, "output", None),
    )


def own_names(loaded: LoadedModel) -> tuple[str, ...]:
    """The model's own names of its outputs (a built-in's CIFAR-10 classes, torchvision's
    categories), or none when its metadata has none for every output."""
    names = tuple(loaded.spec.class_names)
    return names if len(names) == loaded.classes else ()


def output_class_names(source: data.ImageSource, loaded: LoadedModel) -> tuple[str, ...]:
    """What the model's outputs are called for these images: the source's classes when they
    are the model's (``labels_fit``), else the model's own names, as the explorer shows them."""
    if labels_fit(source.class_names, loaded.classes):
        return tuple(source.class_names)
    return output_names(loaded.classes, own_names(loaded))


def fitted_to_model(batch: data.ImageBatch, loaded: LoadedModel, target: str) -> data.ImageBatch:
    """``batch`` with labels that do not fit the model's classes dropped and the model's class
    names used, as ``infer`` and the explorer do; the loss target then has no true class, which
    is refused rather than differentiated against an unrelated class."""
    fits = labels_fit(batch.class_names, loaded.classes)
    fitted, _ = fit_classes(batch, loaded.classes, () if fits else own_names(loaded))
    if fitted.labels is None and batch.labels is not None and target == "loss":
        raise InputError(
            f"{batch.source} has {len(batch.class_names)} classes but {loaded.name} "
            f"predicts {loaded.classes}, so its labels mean nothing to the model and --target "
            "loss has no true class; use --target logit (optionally with --class)."
        )
    return fitted


def add_method_arguments(parser: argparse.ArgumentParser) -> None:
    """What to explain and how: ``--target``, ``--class``, ``--strategy``, and the attribution
    method with its settings and layer (``--method``, ``--setting NAME=VALUE``, ``--layer``)."""
    parser.add_argument(
        "--target",
        choices=TARGETS,
        help="what the maps explain: loss (cross-entropy with the label), logit, or bce (a "
        "sigmoid model's binary cross-entropy of the label; default: the method's, the logit of "
        "the predicted class for the layer methods, the loss for the others; logit with --class)",
    )
    parser.add_argument(
        "--class",
        dest="class_",
        metavar="CLASS",
        help="with --target logit: the class (index or name) whose logit to differentiate "
        "(default: each image's predicted class)",
    )
    parser.add_argument(
        "--strategy",
        default=strategies.NAMES[0],
        choices=strategies.NAMES,
        help=strategies.help_text(),
    )
    parser.add_argument(
        "--method",
        default=attribution.METHOD_NAMES[0],
        metavar="NAME",
        help=f"the attribution method: {', '.join(attribution.METHOD_NAMES)} (default: "
        f"{attribution.METHOD_NAMES[0]}); the layer methods "
        f"({', '.join(attribution.LAYER_METHODS)}) run strategy recompute",
    )
    parser.add_argument(
        "--layer",
        metavar="NAME",
        help="a layer method's layer, by its dotted name in the model as named_modules() "
        "names it, e.g. layer3 (default: chosen automatically)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the method, e.g. samples=8 for smoothgrad (repeat for more)",
    )


def _method_settings(pairs: list[str], method: str) -> dict[str, float | int]:
    """``--setting NAME=VALUE`` pairs as the method's settings (checked by the method itself)."""
    chosen = attribution.get(method)
    own = {parameter.name: parameter for parameter in chosen.parameters}
    settings: dict[str, float | int] = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if name not in own or not text:
            raise InputError(
                f"--setting takes NAME=VALUE with NAME one of {chosen.label}'s settings "
                f"({', '.join(own) or 'none'}); got '{pair}'."
            )
        try:
            settings[name] = int(text) if own[name].whole else float(text)
        except ValueError:
            raise InputError(f"--setting {name}: '{text}' is not a number.") from None
    return settings


def method_of(args: argparse.Namespace) -> attribution.AttributionMethod:
    """The ``gradpick.attribution`` method ``--method``, ``--setting`` and ``--layer`` ask for,
    checked before any work is done; a ``--target`` left out becomes the method's default
    (``attribution.default_target``)."""
    settings = _method_settings(args.setting, args.method)
    method = attribution.build(args.method, settings, args.layer)
    if args.target is None:
        args.target = attribution.default_target(method.name, class_given=args.class_ is not None)
    return method


def batch_description(source: data.ImageSource, args: argparse.Namespace, count: int) -> str:
    """E.g. 'a batch of 300 of the 10,000 images of folder x (from position 0)'."""
    how = f"a seeded sample, seed {args.seed}" if args.seed is not None else f"from {args.start}"
    text = f"a batch of {count:,} of the {len(source):,} images of {source.description} ({how})"
    return text + _one_class_note(source, args, count)


def _one_class_note(source: data.ImageSource, args: argparse.Namespace, count: int) -> str:
    """A warning when a batch of consecutive images holds one class of several: the first N of a
    folder sorted by class (as ImageFolder layouts are) are all of its first class, so an
    accuracy or a pick over them describes that class alone."""
    labels = source.labels()
    if args.seed is not None or labels is None or count >= len(source) or count < 2:
        return ""
    batch = labels[args.start : args.start + count]
    if len(batch) < 2 or bool((batch != batch[0]).any()) or bool((labels == batch[0]).all()):
        return ""
    name = source.class_names[int(batch[0])] if int(batch[0]) < len(source.class_names) else "?"
    return (
        f"; note: all {count:,} are '{name}', since the source is sorted by class: "
        "pass --seed N for a seeded sample of every class"
    )


def class_argument(text: str | None, class_names: tuple[str, ...], target: str) -> int | None:
    """``--class`` as an index or a class name of the source."""
    if text is None:
        return None
    if target != "logit":
        raise InputError("--class chooses a logit; use it with --target logit.")
    if text.isdigit():
        return int(text)
    if text in class_names:
        return class_names.index(text)
    raise InputError(f"Unknown class '{text}'; give an index or one of: {', '.join(class_names)}.")
