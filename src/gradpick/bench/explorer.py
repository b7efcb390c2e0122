"""The explorer benchmark behind ``gradpick bench --explorer``: the app's speed in a real browser.

It starts a real explorer server (``python -m gradpick.ui.launch app.py``, as ``make run``),
drives headless chromium (Debian's, through Playwright) through a scripted session and prints
a markdown table with the median and the worst of each step:

* the first page with thumbnails, counted from the moment the server answered its health check
  (the browser is started then, so that it does not compete with the launcher's work),
  with when the session connected (Streamlit's own page loaded) and what ``import torch`` alone
  costs in a fresh process; and the first page of later sessions, on the warm server;
* a click on a thumbnail until the page settled (its last change, a DOM mutation or a plotly
  redraw, before ``pages.QUIET_MS`` (300 ms) without one: the headline) and until its heatmaps
  are visible (the first paint), every click counted, the session's first one included, with
  the page's own "Server time for this update" and "Gradient step" readouts next to the same
  ``input_gradients`` call in a plain Python process, and the browser's main-thread work for
  the click (Chrome's ``TaskDuration``);
* inference as the page reports it against the same ``infer`` call in plain processes, at
  N = 1,000 for the first page (with more fresh launchers beside the server's own), for samples
  changed in the open page and for later sessions opened on samples of their own, and at
  N = 10,000 (``gradpick.bench.reference``);
* with the whole test split (N = 10,000): switching to the scatter and confusion-matrix tabs
  (each from a settled page), a click in the scatter and a click on a confusion-matrix cell,
  each until the page settled, with the first paint (the chart drawn, the heatmaps shown)
  beside it;
* several sessions clicking at the same moment;
* each way of serving's first visitor on fresh servers (``gradpick.bench.deploy``).

The server keeps the app's own stores in an empty cache folder, so every run infers its batches.
Every wait is a ``MutationObserver`` in the page that resolves on the first frame after its
condition holds, timed on the page's clock: nothing polls the pages being measured.

``--taskset SERVER:BROWSER`` pins the server (and the plain-process reference) and the browser
(with this driver) to separate cores, which tells whether the two compete for the CPU. Targets
live in the table, never in a timed unit test. Playwright is imported only when a benchmark runs.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradpick import attribution
from gradpick.bench import deploy, reference, views
from gradpick.bench.pages import (
    CLICK_TIMEOUT_MS,
    PAGE_SIZE,
    QUIET_MS,
    browser_work,
    click_until_heatmaps,
    click_until_settled,
    idle,
    metric,
    number,
    open_session,
    run_phase,
    thumbnail,
)
from gradpick.bench.rows import markdown_table
from gradpick.bench.serving import (
    CHROMIUM_ARGS,
    streamlit_server,
)
from gradpick.data import CACHE_DIR_ENV, CIFAR10_DIR_ENV
from gradpick.errors import InputError
from gradpick.ui.keys import TRUST_BADGES_CONTAINER, selector

__all__ = [
    "QUICK",
    "default_app",
    "ExplorerBenchConfig",
    "ExplorerReport",
    "badges_figures",
    "badges_readout",
    "parse_taskset",
    "report_text",
    "run_explorer_benchmark",
    "Step",
]


def default_app() -> Path:
    """``app.py`` of the checkout this package runs from, else of the working directory."""
    beside = Path(__file__).resolve().parents[2] / "app.py"
    return beside if beside.is_file() else Path.cwd() / "app.py"


@dataclass(frozen=True)
class ExplorerBenchConfig:
    clicks: int = 10
    """Clicks (and tab switches) per timed step."""
    sessions: int = 8
    """0: no sessions-at-once phase."""
    session_rounds: int = 2
    """Times the sessions all click at once."""
    large_size: int = 10_000
    """0: no large-batch phase (and no plain inference of it)."""
    inference_seeds: int = 5
    """Later sessions, each opened on its own seeded sample of 1,000 images (seeds 1, 2, ...),
    whose inference the page times, against the same samples in the plain process: one run's
    throughput swings by about 15% on a shared machine, so the ratio is of medians. 0: none."""
    sample_changes: int = 5
    """Seeded samples of 1,000 (the seeds after the later sessions') that the first session
    changes to in its sidebar, each inferred in the open page. 0: none."""
    first_launches: int = 3
    """Fresh launchers, each followed by a fresh plain process with glibc's default allocator
    and one with the server's, whose first inference joins the first page's
    (``reference.first_inference_samples``). 0: none."""
    server_cpus: tuple[int, ...] = ()
    """Cores for the server and the plain-process reference; empty: no pinning."""
    browser_cpus: tuple[int, ...] = ()
    """Cores for the browser and this driver; empty: no pinning."""
    threads: int | None = None
    """OMP_NUM_THREADS for the server and the plain reference (None: torch's own default)."""
    method: str | None = None
    """The attribution view the session opens on, through the page's link (None: the page's
    default, the plain gradient); e.g. 'gradcam' times the clicks with the layer maps on."""
    first_visit_runs: int = 5
    """Fresh servers per way of serving whose first visitor is timed (``bench.deploy``)."""
    first_visit_clicks: int = 5
    first_visits_only: bool = False
    app: Path = field(default_factory=default_app)
    python: str = sys.executable
    log: Path = Path("artifacts") / "bench-explorer-server.log"


QUICK = ExplorerBenchConfig(
    clicks=4,
    sessions=4,
    session_rounds=1,
    inference_seeds=2,
    sample_changes=2,
    first_launches=1,
    first_visit_runs=2,
    first_visit_clicks=3,
)


def parse_taskset(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``"0:1"`` or ``"0-1:2,3"``: the server's cores, then the browser's."""
    try:
        server, browser = text.split(":")
        return _cores(server), _cores(browser)
    except ValueError:
        raise InputError(
            f"--taskset takes SERVER:BROWSER core lists such as 0:1 or 0-1:2,3; got {text!r}."
        ) from None


def _cores(text: str) -> tuple[int, ...]:
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    if not cores:
        raise ValueError(text)
    return tuple(cores)


# ----------------------------------------------------------------------------- results


@dataclass
class Step:
    """One timed step: every sample in milliseconds, and the target it is held to."""

    name: str
    samples: list[float] = field(default_factory=list)
    target: str = ""
    limit_ms: float | None = None
    """The target as a bound on the median (and the worst, for the sessions)."""
    worst_bound: bool = False
    worst_limit_ms: float | None = None
    """A second bound, on the worst, beside the median's."""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def worst(self) -> float:
        return max(self.samples) if self.samples else float("nan")

    @property
    def met(self) -> str:
        if self.limit_ms is None or not self.samples:
            return ""
        value = self.worst if self.worst_bound else self.median
        within = value <= self.limit_ms
        if self.worst_limit_ms is not None:
            within = within and self.worst <= self.worst_limit_ms
        return "yes" if within else "no"


@dataclass
class ExplorerReport:
    config: ExplorerBenchConfig
    steps: list[Step]
    ratios: dict[str, float]
    context: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": {**asdict(self.config), "app": str(self.config.app), "log": None},
            "steps": [
                {**asdict(step), "median": step.median, "worst": step.worst, "met": step.met}
                for step in self.steps
            ],
            "ratios": self.ratios,
            "context": self.context,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2, default=str))


def _ms(value: float) -> str:
    return "–" if value != value else f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def report_text(report: ExplorerReport) -> str:
    """The markdown table, the in-app/plain ratios and what the machine was doing."""
    cells = [
        [step.name, len(step.samples), _ms(step.median), _ms(step.worst), step.target, step.met]
        for step in report.steps
    ]
    columns = ["step", "runs", "median (ms)", "worst (ms)", "target", "met"]
    lines = markdown_table(columns, cells, right={"runs", "median (ms)", "worst (ms)"})
    lines.append("")
    for name, value in report.ratios.items():
        lines.append(f"- {name}: {value:.2f}")
    context = report.context
    if "badge_checks" in context.get("page", {}):
        lines.append(f"- trust badges' map checks run (clicks): {context['page']['badge_checks']}")
    for failure in context["failed"]:
        lines.append(f"- failed: {failure}")
    lines.append(
        f"- machine: {context['cpus']} CPUs, load average {context['load_before']} before and "
        f"{context['load_after']} after; server cores {context['server_cpus']}, browser cores "
        f"{context['browser_cpus']}, OMP_NUM_THREADS={context['threads']}; attribution view "
        f"{context.get('page', {}).get('method', 'plain gradient')}"
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- plain reference


def _prefix(cpus: Sequence[int]) -> list[str]:
    return ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []


def _server_env(config: ExplorerBenchConfig, cifar10_dir: str, cache: str | None) -> dict:
    """The threads asked for, the CIFAR-10 copy, and an empty cache folder: the app keeps its
    inference of every batch there, and a store left by an earlier run would be shown instead
    of inferred, which is not what the inference figures time."""
    threads = None if config.threads is None else str(config.threads)
    return {"OMP_NUM_THREADS": threads, CIFAR10_DIR_ENV: cifar10_dir, CACHE_DIR_ENV: cache}


# ----------------------------------------------------------------------------- the browser


async def _thumbnail_clicks(
    page: Any, picks: list[int], steps: dict[str, Step], readouts: dict[str, str]
) -> None:
    work = await browser_work(page)
    ran: Counter[str] = Counter()
    for index in picks:
        point = await thumbnail(page, index)
        before = await work()
        try:
            shown, done = await click_until_settled(page, point, [index])
        except Exception:  # every click counts: one that never settles counts as the timeout
            steps["click_settled"].samples.append(float(CLICK_TIMEOUT_MS))
            raise
        steps["click"].samples.append(shown)
        steps["click_settled"].samples.append(done)
        steps["click_browser"].samples.append(await work() - before)
        server = number(await metric(page, "Server time for this update"))
        step = number(await metric(page, "Gradient step"))
        steps["server"].samples.append(server)
        steps["step"].samples.append(step)
        steps["beyond"].samples.append(server - step)
        badges = await badges_readout(page)
        if badges is not None:
            added, checks = badges
            steps["badges"].samples.append(added)
            steps["beyond_badges"].samples.append(server - step + added)
            ran.update(checks)
    if steps["badges"].samples:
        clicks = len(steps["badges"].samples)
        counts = [f"{check} {ran[check]}/{clicks}" for check in ran]
        readouts["badge_checks"] = ", ".join(counts) or f"none in {clicks} clicks"


async def badges_readout(page: Any) -> tuple[float, list[str]] | None:
    """The trust badges' own readout of the click (``badges_figures``), or None when the page
    shows none."""
    return badges_figures(await page.locator(selector(TRUST_BADGES_CONTAINER)).inner_text())


def badges_figures(text: str) -> tuple[float, list[str]] | None:
    """The badges' milliseconds and the checks that ran, from their caption (each check is named
    there with its own time), or None when ``text`` holds no caption."""
    found = re.search(r"Trust badges \(([\d,.]+) ms(?:; ([^)]*))?\)", text)
    if found is None:
        return None
    each = found.group(2).split(", ") if found.group(2) else []
    return number(found.group(1)), [part.rsplit(" ", 2)[0] for part in each]


async def _sessions_at_once(
    browser: Any,
    url: str,
    sessions: int,
    rounds: int,
    picks: list[int],
    steps: dict[str, Step],
) -> None:
    """``sessions`` sessions each click their own thumbnail at the same moment, ``rounds``
    times; every click's time to its heatmaps goes into steps["sessions"], its page's
    server-time readout into steps["sessions_server"] and its browser work into
    steps["sessions_browser"]. The sessions open one after another, each timed as a first page
    on a warm server."""
    pages = []
    for _ in range(sessions):
        opened = await open_session(browser, url)
        steps["warm_first"].samples.append((opened.shown - opened.asked) * 1000)
        pages.append(opened.page)
    readers = [await browser_work(page) for page in pages]
    for round_number in range(rounds):
        chosen = picks[round_number * sessions : (round_number + 1) * sessions]
        points = [await thumbnail(page, index) for page, index in zip(pages, chosen, strict=True)]
        before = [await read() for read in readers]
        times = await asyncio.gather(
            *(
                click_until_heatmaps(page, point, [index])
                for page, point, index in zip(pages, points, chosen, strict=True)
            )
        )
        steps["sessions"].samples.extend(times)
        await asyncio.gather(*(idle(page) for page in pages))
        for page, read, work_before in zip(pages, readers, before, strict=True):
            steps["sessions_browser"].samples.append(await read() - work_before)
            server = number(await metric(page, "Server time for this update"))
            steps["sessions_server"].samples.append(server)
    for page in pages:
        await page.context.close()


def _click_step(name: str) -> Step:
    """A click timed to the settled page, held to the click's targets."""
    return Step(name, target="median ≤ 300 ms, worst ≤ 800 ms", limit_ms=300, worst_limit_ms=800)


def _steps(large_size: int) -> dict[str, Step]:
    large = f"N = {large_size:,}"
    within_500: dict[str, Any] = {"target": "≤ 500 ms", "limit_ms": 500}  # the large batch
    return {
        "first": Step(
            "first page with thumbnails (after healthy, browser up)", target="≤ 4 s", limit_ms=4000
        ),
        "healthy": Step("server started → healthy (the launcher's imports and model)"),
        "first_connected": Step("first page: session connected (Streamlit's page loaded)"),
        "import_torch": Step("import torch in a fresh process (plain reference)"),
        "warm_first": Step("first page of a later session (server warm; from goto)"),
        "click_settled": _click_step(
            f"click thumbnail → page settled (last change before {QUIET_MS} ms quiet)"
        ),
        "click": Step("click thumbnail → heatmaps visible (first paint)"),
        "click_browser": Step("browser main-thread work per click (Chrome TaskDuration)"),
        "server": Step("page readout: server time for this update"),
        "step": Step("page readout: gradient step"),
        "plain_step": Step("same input_gradients call, plain process (torch's threads)"),
        "plain_step_one": Step("same call, plain process, one thread (as the page)"),
        "beyond": Step("server time beyond the gradient step", target="≤ 60 ms", limit_ms=60),
        "triage_tab": Step("Triage tab → page settled (its first opening scores every image)"),
        "triage_verdict": _click_step("triage: verdict → next suspect settled"),
        "compare_tab": Step(
            "Compare tab → page settled (its first opening infers the second model)"
        ),
        "compare_click": _click_step("compare: flip cell → both models' maps settled"),
        "badges": Step("trust badges: server time added per click, after the maps"),
        "beyond_badges": Step(
            "server time beyond the gradient step, trust badges included",
            target="≤ 60 ms",
            limit_ms=60,
        ),
        "sessions": Step(
            "sessions at once: click → heatmaps",
            target="each < 2 s",
            limit_ms=2000,
            worst_bound=True,
        ),
        "sessions_server": Step("sessions at once: page readout, server time"),
        "sessions_browser": Step("sessions at once: browser main-thread work per click"),
        "large_ready": Step(f"{large}: Enter → page ready (inference included)"),
        "scatter_tab": Step(f"{large}: switch to scatter tab → page settled", **within_500),
        "scatter_tab_drawn": Step(f"{large}: switch to scatter tab → chart drawn (first paint)"),
        "scatter_tab_first": Step(
            f"{large}: first opening of the scatter tab → page settled", **within_500
        ),
        "scatter_tab_picked": Step(
            f"{large}: scatter tab after picks made elsewhere → page settled", **within_500
        ),
        "embedding_tab": Step(f"{large}: switch to feature-space tab → page settled", **within_500),
        "embedding_tab_drawn": Step(
            f"{large}: switch to feature-space tab → chart drawn (first paint)"
        ),
        "embedding_tab_first": Step(
            f"{large}: first opening of the feature-space tab → page settled", **within_500
        ),
        "table_tab": Step(f"{large}: switch to table tab → page settled", **within_500),
        "table_tab_drawn": Step(f"{large}: switch to table tab → table drawn (first paint)"),
        "confusion_tab": Step(f"{large}: switch to confusion tab → page settled", **within_500),
        "confusion_tab_drawn": Step(
            f"{large}: switch to confusion tab → chart drawn (first paint)"
        ),
        "confusion_click": Step(f"{large}: confusion cell → page settled", **within_500),
        "confusion_click_drawn": Step(f"{large}: confusion cell → heatmaps (first paint)"),
        "scatter_click": Step(f"{large}: scatter point → page settled", **within_500),
        "scatter_click_drawn": Step(f"{large}: scatter point → heatmaps (first paint)"),
    }


LARGE_ROWS = (
    "large_ready",
    "scatter_tab",
    "scatter_tab_drawn",
    "scatter_tab_first",
    "scatter_tab_picked",
    "confusion_tab",
    "confusion_tab_drawn",
    "embedding_tab",
    "embedding_tab_drawn",
    "embedding_tab_first",
    "table_tab",
    "table_tab_drawn",
    "confusion_click",
    "confusion_click_drawn",
    "scatter_click",
    "scatter_click_drawn",
)
"""The rows of the large-batch phase, in the table's order."""


def _load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


async def _drive(
    config: ExplorerBenchConfig, chromium: str, env: dict[str, str | None], picks: list[int]
) -> tuple[dict[str, Step], dict[str, str], list[str]]:
    """The scripted session; a phase that fails is reported and the next one still runs."""
    from playwright.async_api import async_playwright

    steps = _steps(config.large_size)
    readouts: dict[str, str] = {}
    failures: list[str] = []

    def record(step: str, milliseconds: float) -> None:
        steps[step].samples.append(milliseconds)

    phase = functools.partial(run_phase, "explorer bench", failures=failures)

    prefix = _prefix(config.server_cpus)
    # The server first, the browser once it is healthy: the launcher infers the first page's
    # batch, and a browser starting on the same cores would slow that inference, which a
    # user's browser, open before the server, does not. The first page counts from then.
    with streamlit_server(config.app, env, config.log, config.python, prefix) as server:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            ready = time.monotonic()
            query = "" if config.method is None else f"/?method={config.method}"
            opened = await open_session(browser, server.url + query)
            page = opened.page
            steps["first"].samples.append((opened.shown - ready) * 1000)
            steps["healthy"].samples.append((server.healthy_at - server.launched) * 1000)
            steps["first_connected"].samples.append((opened.connected - ready) * 1000)
            readouts["first_inference"] = await metric(page, "Throughput")
            await phase("clicks", _thumbnail_clicks(page, picks[: config.clicks], steps, readouts))
            if config.method not in (None, "gradient"):  # the view's own readout proves it on
                label = attribution.get(config.method).label
                readouts["method"] = f"{label} {await metric(page, label)}"
            await phase("triage and compare", views.triage_and_compare(page, config.clicks, record))
            if config.sample_changes:
                seeds = range(config.inference_seeds + 1, _last_seed(config) + 1)
                await phase("sample changes", views.sample_changes(page, seeds, readouts))
            if config.inference_seeds:
                await phase(
                    "inference",
                    views.seeded_inference(browser, server.url, config.inference_seeds, readouts),
                )
            if config.sessions:
                await phase(
                    "sessions",
                    _sessions_at_once(
                        browser,
                        server.url,
                        config.sessions,
                        config.session_rounds,
                        picks[config.clicks :],
                        steps,
                    ),
                )
            if config.large_size:
                await phase(
                    "large batch",
                    views.large_batch(page, config.large_size, config.clicks, record, readouts),
                )
            await browser.close()
    return steps, readouts, failures


def _last_seed(config: ExplorerBenchConfig) -> int:
    """The later sessions' seeds come first (1, 2, ...), then the sample changes'."""
    return config.inference_seeds + config.sample_changes


def _inference_ratios(
    config: ExplorerBenchConfig,
    readouts: dict[str, str],
    first: dict[str, list[float]],
    *plain_seeded: list[float],
) -> dict[str, float]:
    """The page's inference at N = 1,000 over the plain process's, each a ratio of medians:
    the first page's (the session's server and the fresh launchers, against every fresh plain
    process), the later sessions' and the sample changes' (against the same seeds in the plain
    processes before and after the browser session)."""
    name = (
        f"inference in the app / plain process, N = 1,000, the first page's: medians of "
        f"{len(first['app'])} servers and {len(first['plain'])} plain processes (target ≥ 0.95)"
    )
    ratios = {name: statistics.median(first["app"]) / statistics.median(first["plain"])}
    if first["plain_server_allocator"]:
        name = (
            "the server's allocator policy alone: plain process with it / without, N = 1,000, "
            f"medians of {len(first['plain_server_allocator'])} and {len(first['plain'])}"
        )
        ratios[name] = statistics.median(first["plain_server_allocator"]) / statistics.median(
            first["plain"]
        )
    cases = {
        "seeded_inference": ("later sessions, each opened on its own sample", 0),
        "sample_changes": ("a sample changed in the open page", config.inference_seeds),
    }
    for key, (what, offset) in cases.items():
        if key not in readouts:
            continue
        in_app = [number(text) for text in readouts[key].split(", ")]
        plain = [img_s for run in plain_seeded for img_s in run[offset : offset + len(in_app)]]
        name = (
            f"inference in the app / plain process, N = 1,000, {what}: medians of "
            f"{len(in_app)} samples and {len(plain)} (target ≥ 0.95)"
        )
        ratios[name] = statistics.median(in_app) / statistics.median(plain)
    return ratios


def run_explorer_benchmark(config: ExplorerBenchConfig, chromium: str) -> ExplorerReport:
    """The whole scripted session against a fresh server; see the module docstring."""
    cifar10_dir = os.environ.get(CIFAR10_DIR_ENV)
    if not cifar10_dir:
        raise InputError(
            f"Set ${CIFAR10_DIR_ENV} to a CIFAR-10 folder with train/ and test/ trees: the "
            "benchmark serves the test split from it."
        )
    if not config.app.is_file():
        raise InputError(f"{config.app}: no such app; run from the gradpick checkout.")
    clicked = config.clicks + config.sessions * config.session_rounds
    if clicked > PAGE_SIZE:
        raise InputError(f"At most {PAGE_SIZE} clicks in all (one per thumbnail); got {clicked}.")
    picks = [(7 * number + 3) % PAGE_SIZE for number in range(clicked)]
    if config.first_visits_only:
        return _first_visits_report(config, chromium, _server_env(config, cifar10_dir, None))
    with tempfile.TemporaryDirectory(prefix="gradpick-bench-cache-") as cache:
        env = _server_env(config, cifar10_dir, cache)
        load_before = _load_average()
        sizes = [1000, config.large_size] if config.large_size else [1000]
        prefix = _prefix(config.server_cpus)
        seeds = list(range(1, _last_seed(config) + 1))
        arguments = [sizes, picks[: config.clicks], seeds]
        plain = reference.in_fresh_process("plain_reference", arguments, env, config.python, prefix)
        launched = reference.first_inference_samples(
            config.first_launches, env, config.python, prefix
        )
        if config.browser_cpus:
            os.sched_setaffinity(0, config.browser_cpus)  # the driver and the browser it launches
        steps, readouts, failures = asyncio.run(_drive(config, chromium, env, picks))
        # Once before and once after the browser session: on a machine whose load changes, the
        # app's inference is compared with the plain process's mean of the two.
        after = reference.in_fresh_process("plain_reference", arguments, env, config.python, prefix)
    steps["plain_step"].samples = list(plain["step_ms"]) + list(after["step_ms"])
    steps["plain_step_one"].samples = list(plain["step_one_thread_ms"]) + list(
        after["step_one_thread_ms"]
    )
    steps["import_torch"].samples = [plain["import_torch_ms"], after["import_torch_ms"]]
    first = {
        **launched,
        "app": [number(readouts["first_inference"]), *launched["app"]],
        "plain": [plain["infer_1000_img_s"], after["infer_1000_img_s"], *launched["plain"]],
    }
    for size in sizes:
        key = f"infer_{size}_img_s"
        plain[key] = statistics.mean([plain[key], after[key]])
    ratios = {
        "gradient step, page readout / plain process (medians)": (
            steps["step"].median / steps["plain_step"].median
        ),
        **_inference_ratios(config, readouts, first, plain["seeded_img_s"], after["seeded_img_s"]),
    }
    if steps["badges"].samples:
        name = "trust badges / the click's server time before them (medians; target ≤ 0.5)"
        ratios[name] = steps["badges"].median / steps["server"].median
    if "large_inference" in readouts:
        name = f"inference in the app / plain process, N = {config.large_size:,} (target ≥ 0.95)"
        large = number(readouts["large_inference"])
        ratios[name] = large / plain[f"infer_{config.large_size}_img_s"]
    context = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_before": load_before,
        "load_after": _load_average(),
        "server_cpus": ",".join(map(str, config.server_cpus)) or "any",
        "browser_cpus": ",".join(map(str, config.browser_cpus)) or "any",
        "threads": config.threads if config.threads is not None else "unset",
        "plain": plain,
        "plain_after": after,
        "first_inference": first,
        "page": readouts,
        "failed": failures,
    }
    order = [
        "click_settled",
        "first",
        "healthy",
        "first_connected",
        "import_torch",
        "warm_first",
        "click",
        "click_browser",
        "server",
        "step",
        "plain_step",
        "plain_step_one",
        "beyond",
        "badges",
        "beyond_badges",
        "triage_tab",
        "triage_verdict",
        "compare_tab",
        "compare_click",
        "sessions",
        "sessions_server",
        "sessions_browser",
        *LARGE_ROWS,
    ]
    steps["sessions"].name = f"{config.sessions} sessions at once: click → heatmaps"
    steps["sessions_server"].name = f"{config.sessions} sessions at once: page's server time"
    steps[
        "sessions_browser"
    ].name = f"{config.sessions} sessions at once: browser main-thread work per click"
    skipped = set()  # the rows of a phase left out (--clicks-only) are left out of the table
    if not config.sessions:
        skipped |= {"warm_first", "sessions", "sessions_server", "sessions_browser"}
    if not config.large_size:
        skipped |= set(LARGE_ROWS)
    rows = [steps[name] for name in order if name not in skipped]
    report = _first_visits_report(config, chromium, _server_env(config, cifar10_dir, None))
    context["failed"] += report.context["failed"]
    return ExplorerReport(config, rows + report.steps, ratios | report.ratios, context)


def _first_visits_report(
    config: ExplorerBenchConfig, chromium: str, env: dict[str, str | None]
) -> ExplorerReport:
    """The first visitors' rows of each way of serving (``deploy.every_server``)."""
    load_before, runs, clicks = _load_average(), config.first_visit_runs, config.first_visit_clicks
    table, memory, failed = deploy.every_server(runs, clicks, chromium, config.app, env)
    steps = [Step(n, s, target, limit, worst_bound=True) for n, s, target, limit in table]
    machine = {"server_cpus": "any", "browser_cpus": "any", "threads": config.threads or "unset"}
    context = {"cpus": os.cpu_count(), "load_before": load_before, "load_after": _load_average()}
    return ExplorerReport(config, steps, memory, {**context, **machine, "failed": failed})
