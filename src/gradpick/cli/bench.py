"""``gradpick bench``, ``bench-infer``, ``bench-distributed`` and ``bench-triage``: the benchmarks'
commands."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradpick import attribution, data
from gradpick.cli.arguments import (
    Commands,
    add_data_arguments,
    add_model_arguments,
    data_source,
    fraction,
    load_model,
    positive_int,
    spec_overrides,
)
from gradpick.errors import InputError
from gradpick.models import shipped as models
from gradpick.runtime import devices
from gradpick.runtime.devices import DEVICE_CHOICES

__all__ = ["register"]


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.explorer:
        return _bench_explorer(args)
    if args.badges:
        return _bench_badges(args)
    if args.cam:
        return _bench_cam(args)
    from gradpick.bench import strategies as bench

    config = _given(
        bench.QUICK if args.quick else bench.BenchConfig(),
        models=args.models,
        sizes=args.n,
        picks=args.k,
        repeats=args.repeats,
        device=args.device,
        row_budget_seconds=args.budget,
        threads=args.threads,
    )
    report = bench.run_benchmark(config, progress=lambda line: print(line, file=sys.stderr))
    return _written(report, bench.report_text(report), args.json or "bench.json")


def _given(config: Any, **options: Any) -> Any:
    """``config`` (a dataclass) with the options given on the command line: ``None`` is an
    option not given; lists become tuples, as the configs hold them."""
    overrides = {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in options.items()
        if value is not None
    }
    return replace(config, **overrides)


def _written(report: Any, text: str, path: str) -> int:
    """Print a benchmark's table, write its JSON to ``path`` and say so."""
    print(text)
    report.write_json(path)
    print(f"\nwrote {path}")
    return 0


def _bench_cam(args: argparse.Namespace) -> int:
    from gradpick.bench import cam

    config = _given(
        cam.QUICK if args.quick else cam.CamBenchConfig(),
        model=args.cam_model,
        sizes=args.n,
        picks=args.k,
        repeats=args.repeats,
        threads=args.threads,
    )
    report = cam.run_cam_benchmark(config, progress=lambda line: print(line, file=sys.stderr))
    return _written(report, cam.report_text(report), args.json or "bench-cam.json")


def _bench_badges(args: argparse.Namespace) -> int:
    from gradpick.bench import badges

    if not os.environ.get(data.CIFAR10_DIR_ENV):
        raise InputError(f"Set ${data.CIFAR10_DIR_ENV} to a CIFAR-10 folder (the test split).")
    picks = args.k[0] if args.k else 1
    clicks = args.clicks or (3 if args.quick else 10)
    with devices.cpu_threads(args.threads):
        rows = badges.badge_rows(
            picks=picks, clicks=clicks, progress=lambda line: print(line, file=sys.stderr)
        )
    print(badges.report_text(rows))
    return 0


def _bench_explorer(args: argparse.Namespace) -> int:
    import shutil

    from gradpick.bench import explorer as explorer_bench

    if args.compare_with and not args.store:
        raise InputError("--compare-with compares a second store with --store's: give --store.")
    chromium = shutil.which("chromium")
    if chromium is None:
        raise InputError(
            "The explorer benchmark drives Debian's chromium: apt-get install chromium."
        )
    if args.store:
        return _bench_explorer_store(args, chromium)
    config = explorer_bench.QUICK if args.quick else explorer_bench.ExplorerBenchConfig()
    if args.clicks_only:
        config = replace(config, sessions=0, large_size=0, inference_seeds=0, sample_changes=0)
    if args.taskset:
        server, browser = explorer_bench.parse_taskset(args.taskset)
        config = replace(config, server_cpus=server, browser_cpus=browser)
    config = _given(config, clicks=args.clicks, threads=args.threads, method=args.method)
    config = _given(config, first_visit_runs=args.first_visits)
    if args.first_visits_only:
        config = replace(config, first_visits_only=True)
    report = explorer_bench.run_explorer_benchmark(config, chromium)
    return _written(report, explorer_bench.report_text(report), args.json or "bench-explorer.json")


def _bench_explorer_store(args: argparse.Namespace, chromium: str) -> int:
    from pathlib import Path

    from gradpick.bench import explorer_store

    config = explorer_store.StoreBenchConfig(
        Path(args.store).expanduser().resolve(),
        switches=args.clicks or (1 if args.quick else 3),
        cold=not args.keep_pixels,
        restart=not args.quick,
        compare_with=Path(args.compare_with).expanduser().resolve() if args.compare_with else None,
    )
    report = explorer_store.run_store_benchmark(config, chromium)
    text = explorer_store.report_text(report)
    return _written(report, text, args.json or "bench-explorer-store.json")


def _cmd_bench_infer(args: argparse.Namespace) -> int:
    from gradpick.bench import inference as infer_bench

    images = dict(zip(args.sides, args.images, strict=True)) if args.images else None
    if args.images and len(args.images) != len(args.sides):
        raise InputError("--images needs one count per --sides value.")
    config = infer_bench.InferBenchConfig(
        folder=args.data,
        sides=tuple(args.sides),
        images=images,
        batch_size=args.batch_size,
        workers=args.workers,
        repeats=args.repeats,
        store_rows=args.store_rows,
        memory_counts=tuple(args.memory or ()),
        memory_stand_in=tuple(args.memory_stand_in or ()),
        fixed_mmap_threshold=args.fixed_mmap_threshold,
        device=args.device,
        threads=args.threads,
    )
    rows, environment = infer_bench.run(config)
    print(infer_bench.table(rows))
    infer_bench.write_json(args.json, config, rows, environment)
    print(f"\nwrote {args.json}")
    return 0


def _bench_infer_parser(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench-infer",
        help="inference from a folder against a hand-written DataLoader loop; stored outputs "
        "reopened; memory",
        description="Time infer_source over a folder's first files at each input side against "
        "a hand-written DataLoader + model loop over the same files, time reopening a stored "
        "table in the explorer, and (with --memory) measure resident memory in fresh processes.",
    )
    parser.add_argument("--data", required=True, help="an ImageFolder tree")
    parser.add_argument("--sides", nargs="+", type=positive_int, default=[32, 224])
    parser.add_argument(
        "--images", nargs="+", type=positive_int, help="images per side (default 2000 and 256)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--workers", type=int, help="DataLoader workers for both loops")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--store-rows", type=positive_int, default=50_000)
    parser.add_argument(
        "--memory", nargs="+", type=positive_int, metavar="COUNT", help="image counts to measure"
    )
    parser.add_argument(
        "--memory-stand-in",
        nargs="+",
        type=positive_int,
        metavar="SIDE",
        help="sides whose memory rows use a pooling + linear stand-in model (decoding-bound)",
    )
    parser.add_argument(
        "--fixed-mmap-threshold",
        action="store_true",
        help="memory rows with the explorer's allocator setting (freed buffers returned to the "
        "system instead of kept on glibc's heap)",
    )
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--threads", type=positive_int, help="torch intra-op threads")
    parser.add_argument("--json", default="bench-infer.json")
    parser.set_defaults(handler=_cmd_bench_infer)


def _bench_parser(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench",
        help="time every gradient strategy against the floor and captum",
        description="Benchmark every strategy (and the hand-written floor, captum's Saliency, "
        "recompute with memory measurement, and inference) over models, batch sizes N and "
        "picked counts k; prints a markdown table and writes JSON.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small grid that runs in under a minute"
    )
    parser.add_argument("--models", nargs="+", choices=list(models.ARCHITECTURES))
    parser.add_argument("--n", nargs="+", type=positive_int, help="batch sizes N")
    parser.add_argument("--k", nargs="+", type=positive_int, help="numbers of picked images")
    parser.add_argument("--repeats", type=positive_int, help="runs per row (median reported)")
    parser.add_argument("--device", choices=DEVICE_CHOICES)
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds an expensive row (summed, retain_graph) may take before it is skipped",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch intra-op threads (default: torch's own; --quick uses 1, steady on busy cores)",
    )
    parser.add_argument(
        "--cam",
        action="store_true",
        help="time Grad-CAM of k picks against a hand-written hook, pytorch-grad-cam and "
        "torch-cam instead (CPU; --n, --k, --repeats, --threads apply)",
    )
    parser.add_argument(
        "--cam-model",
        choices=("resnet20", "resnet18"),
        help="with --cam: the model (random weights; resnet18 is torchvision's, at 224 pixels)",
    )
    parser.add_argument(
        "--explorer",
        action="store_true",
        help="time the Streamlit explorer in a real browser instead (reads $GRADPICK_CIFAR10_DIR)",
    )
    parser.add_argument(
        "--badges",
        action="store_true",
        help="time each of the explorer's trust badges' checks per click instead, without a "
        "browser (reads $GRADPICK_CIFAR10_DIR; --k, --clicks apply)",
    )
    parser.add_argument(
        "--taskset",
        metavar="SERVER:BROWSER",
        help="with --explorer: pin the server and the browser to these cores, e.g. 0:1",
    )
    parser.add_argument(
        "--clicks", type=positive_int, help="with --explorer: clicks per timed step (default 10)"
    )
    parser.add_argument(
        "--method",
        choices=attribution.METHOD_NAMES,
        help="with --explorer: the attribution view the session opens on (by its link), e.g. "
        "gradcam for the layer maps (default: the page's own, the plain gradient)",
    )
    parser.add_argument(
        "--clicks-only",
        action="store_true",
        help="with --explorer: the first page, the thumbnail clicks, triage and compare "
        "(about 70 s)",
    )
    parser.add_argument(
        "--first-visits",
        type=positive_int,
        metavar="RUNS",
        help="with --explorer: fresh servers per way of serving (make run's launcher, a plain "
        "streamlit run, hosted from .venv-cpu) whose first visitor is timed (default 5, --quick 2)",
    )
    parser.add_argument(
        "--first-visits-only",
        action="store_true",
        help="with --explorer: only the first visitors' rows",
    )
    parser.add_argument(
        "--store",
        metavar="STORE",
        help="with --explorer: time the explorer opened on this store instead (gradpick infer "
        "--out): the first page of a first server, every view's and tab's first opening and "
        "later switches (--clicks of them), a click per view, the server's peak memory, and a "
        "second server's first page (not with --quick)",
    )
    parser.add_argument(
        "--compare-with",
        metavar="STORE",
        help="with --store: last, compare it with this second store of the same images (another "
        "model's): the store chosen in the sidebar, the Compare tab's first opening and later "
        "switches, a click on a flip cell",
    )
    parser.add_argument(
        "--keep-pixels",
        action="store_true",
        help="with --store: leave the pixels kept beside the store (STORE.pixels.pt) in place, "
        "instead of removing them to time a first server",
    )
    parser.add_argument(
        "--json",
        help="where to write the JSON results (bench.json, bench-explorer.json, "
        "bench-explorer-store.json)",
    )
    parser.set_defaults(handler=_cmd_bench)


def _cmd_bench_distributed(args: argparse.Namespace) -> int:
    import tempfile

    from gradpick.bench.distributed import bench_table, benchmark
    from gradpick.outputs import distributed

    loaded = load_model(args)
    source = data_source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), 0, args.size)
    root, rows = distributed.source_rows(source, positions, loaded.classes)
    recipe = distributed.model_recipe(loaded.name, args.weights, spec_overrides(args))
    print(f"{loaded.name} on {len(rows):,} images of {source.description}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gradpick-bench-") as scratch:
        results = benchmark(
            recipe, rows, root, loaded.spec, Path(scratch), args.workers, args.batch_size
        )
    print(bench_table(results))
    cap = distributed.local_object_store_bytes()
    print(f"\nobject store of the local Ray instance capped at {cap / 1024**3:.2f} GiB")
    return 0


def _bench_distributed_parser(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench-distributed",
        help="time inference on Ray Data against one process on the same cores",
        description="Infer the same images in one process (one torch thread, then --workers "
        "threads) and on a local Ray instance (--workers single-CPU workers), each writing a "
        "store; prints throughput and peak memory of the driver, the workers and Ray's own "
        "processes.",
    )
    add_data_arguments(parser, "train")
    parser.add_argument("--size", type=positive_int, help="number of images (default: all)")
    add_model_arguments(parser)
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument("--batch-size", type=positive_int, default=500)
    parser.set_defaults(handler=_cmd_bench_distributed)


def register(commands: Commands) -> None:
    _bench_parser(commands)
    _bench_infer_parser(commands)
    _bench_distributed_parser(commands)
    _bench_triage_parser(commands)


def _cmd_bench_triage(args: argparse.Namespace) -> int:
    import json
    import os
    from dataclasses import asdict

    from gradpick.bench import triage as triage_bench

    root = args.data or os.path.join(os.environ.get("GRADPICK_CIFAR10_DIR", ""), "test")
    if args.noise and not args.data and not os.environ.get("GRADPICK_CIFAR10_DIR"):
        raise InputError("Name a labelled folder with --data, or set GRADPICK_CIFAR10_DIR.")
    rows, timed = triage_bench.run(
        root,
        tuple(args.noise),
        args.model,
        args.seed,
        progress=lambda line: print(line, file=sys.stderr),
        timing_store=args.timing_store,
    )
    print(triage_bench.report_text(rows, timed))
    payload = {
        "rows": [asdict(row) for row in rows],
        "timing": None if timed is None else asdict(timed),
    }
    Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.json}")
    return 0


def _bench_triage_parser(commands: Commands) -> None:
    from gradpick.bench.triage import NOISE_SHARES

    parser = commands.add_parser(
        "bench-triage",
        help="label triage on seeded noisy copies of a folder, against cleanlab",
        description="Link a labelled folder (default: $GRADPICK_CIFAR10_DIR/test) into a "
        "temporary noisy copy with a seeded share of files under wrong classes, infer it into a "
        "store with embeddings, and compare gradpick's triage with cleanlab's on the same "
        "stored probabilities; also time scoring 50,000 rows. Needs cleanlab.",
    )
    parser.add_argument("--data", help="an ImageFolder tree (default: the CIFAR-10 test split)")
    parser.add_argument(
        "--noise",
        nargs="*",
        type=fraction,
        default=list(NOISE_SHARES),
        help="noise shares (none: only the timing, which then needs --timing-store)",
    )
    parser.add_argument(
        "--timing-store",
        help="time scoring on this store's first 50,000 rows (one with embeddings, e.g. "
        "`gradpick infer --split train --out DIR --embeddings`); default: the first noisy "
        "store's rows stacked",
    )
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="bench-triage.json")
    parser.set_defaults(handler=_cmd_bench_triage)
