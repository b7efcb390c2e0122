"""What the explorer benchmark sets the page's inference against: the same calls in a plain
process, and the launcher's own first inference in fresh processes.

One process's inference speed is one draw. With glibc's default allocator, six fresh processes
running the same calls ran at about 1,230 img/s in five and 1,550 in one, steadily within each
(the same with address-space randomisation off): how often each batch's freed memory goes back
to the system depends on the heap's layout (``process.keep_freed_memory_for_reuse``, which the
explorer's server takes). A ratio of one server to one plain process thus swings by a fifth
either way for no reason of the app's; the benchmark takes the first page's ratio of medians
over several processes of each kind (``first_inference_samples``).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gradpick.bench.serving import environment
from gradpick.data import CACHE_DIR_ENV

__all__ = [
    "first_inference_samples",
    "in_fresh_process",
    "launcher_inference",
    "plain_reference",
]


def plain_reference(
    sizes: Sequence[int],
    indices: Sequence[int],
    seeds: Sequence[int] = (),
    server_allocator: bool = False,
) -> dict[str, Any]:
    """The app's default model and batches, timed in this (plain) process: ``infer`` at the
    app's batch size for each N and for each seeded sample of 1,000 (``seeds``, after the first
    N, as the page infers them), and one ``input_gradients`` step per index (k = 1, the page's
    default target and strategy) on the first N (none without ``indices``). With
    ``server_allocator``, the process takes the explorer server's allocator policy
    (``process.keep_freed_memory_for_reuse``) before any of that; without, glibc's default, as
    a user's own script runs."""
    if server_allocator:
        from gradpick.runtime import process

        process.keep_freed_memory_for_reuse()
    import torch

    from gradpick.data import ImageBatch
    from gradpick.gradients.engine import input_gradients
    from gradpick.outputs.inference import InferenceResult, infer
    from gradpick.outputs.stores import INFERENCE_BATCH_SIZE
    from gradpick.runtime.devices import cpu_threads
    from gradpick.ui import service
    from gradpick.ui.heatmaps import STEP_CPU_THREADS

    option = service.model_options()[0]
    model = service.load_model(option, torch.device("cpu")).module
    base = service.DataChoice()
    source = service.open_source(base)
    seed = 0 if service.sorted_by_class(source) else None
    figures: dict[str, Any] = {"model": option.identity, "threads": torch.get_num_threads()}

    def inferred(batch: ImageBatch) -> InferenceResult:
        return infer(
            model, batch.images, batch.labels, batch_size=INFERENCE_BATCH_SIZE, features=True
        )

    batches = {}
    for size in sizes:
        batch = service.read_batch(source, replace(base, size=size, seed=seed))
        batches[size] = batch
        infer(model, batch.images[:INFERENCE_BATCH_SIZE], batch_size=INFERENCE_BATCH_SIZE)
        result = inferred(batch)
        figures[f"infer_{size}_ms"] = result.milliseconds
        figures[f"infer_{size}_img_s"] = result.images_per_second
        if size == sizes[0]:
            # The seeded samples after the first N and before the larger, in the page's order:
            # a process's speed may change after its first large batch (``process``'s heap).
            figures["seeded_img_s"] = [
                inferred(
                    service.read_batch(source, replace(base, size=1000, seed=sample_seed))
                ).images_per_second
                for sample_seed in seeds
            ]
    figures["step_ms"], figures["step_one_thread_ms"] = [], []
    if indices:
        batch = batches[sizes[0]]
        images = batch.float_images()
        input_gradients(model, images, [indices[0]], labels=batch.labels)  # warm-up
        figures["step_ms"] = [
            input_gradients(model, images, [index], labels=batch.labels).timing for index in indices
        ]
        with cpu_threads(STEP_CPU_THREADS):
            figures["step_one_thread_ms"] = [
                input_gradients(model, images, [index], labels=batch.labels).timing
                for index in indices
            ]
    return figures


def launcher_inference() -> float:
    """The explorer's launcher's work before it serves (``ui.warmup.warm``: imports, model,
    warm-up pass, the page's default batch inferred) in this process; the throughput of that
    inference, which is what the first page shows (img/s)."""
    from gradpick.runtime import devices
    from gradpick.ui import cache, page, service, warmup

    warmup.warm([])
    option = service.model_options()[0]
    base = service.DataChoice()
    source = cache.source(base.source_key, base)
    device = devices.resolve_device("auto")
    choice = service.default_batch(base, source)
    loaded, _ = page.infer_choice(choice, source, option, device, keep=True)  # from the cache
    return float(loaded.result.images_per_second)


def in_fresh_process(
    call: str,
    args: Sequence[Any],
    env: Mapping[str, str | None],
    python: str,
    prefix: Sequence[str] = (),
) -> Any:
    """``call(*args)`` of this module in a fresh Python process with ``env`` over this one's
    (a None value removes the variable), after ``prefix`` (e.g. ``taskset -c 0``); its result
    through JSON. A dict result gains ``import_torch_ms``, what importing torch took there."""
    code = (
        "import json, sys, time; started = time.perf_counter(); import torch; "
        "imported = (time.perf_counter() - started) * 1000; "
        "from gradpick.bench import reference; "
        f"found = reference.{call}(*json.loads(sys.argv[1])); "
        "found = {**found, 'import_torch_ms': imported} if isinstance(found, dict) else found; "
        "print(json.dumps(found))"
    )
    command = [*prefix, python, "-c", code, json.dumps(list(args))]
    done = subprocess.run(
        command, env=environment(env), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{call} in a fresh process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_inference_samples(
    count: int, env: Mapping[str, str | None], python: str, prefix: Sequence[str] = ()
) -> dict[str, list[float]]:
    """The first page's inference (img/s) in ``count`` fresh launchers (``app``), each with an
    empty cache folder of its own (a store left by another would be shown instead of
    inferred), alternating with ``count`` fresh plain processes inferring the same 1,000 images
    with glibc's default allocator (``plain``) and ``count`` with the server's
    (``plain_server_allocator``), so that a change in the machine's load falls on all alike."""
    found: dict[str, list[float]] = {"app": [], "plain": [], "plain_server_allocator": []}
    for _ in range(count):
        with tempfile.TemporaryDirectory(prefix="gradpick-bench-launch-") as cache:
            own = {**env, CACHE_DIR_ENV: cache}
            found["app"].append(
                float(in_fresh_process("launcher_inference", [], own, python, prefix))
            )
        for key, server_allocator in (("plain", False), ("plain_server_allocator", True)):
            arguments = [[1000], [], [], server_allocator]
            figures = in_fresh_process("plain_reference", arguments, env, python, prefix)
            found[key].append(float(figures["infer_1000_img_s"]))
    return found
