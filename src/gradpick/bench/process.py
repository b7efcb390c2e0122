"""Process memory as Linux reports it in ``/proc``: the one reader every benchmark uses.

Resident-set figures come from ``/proc/PID/status`` (VmRSS: resident now; VmHWM: peak resident
so far), in kB as the kernel writes them; the process tree comes from ``/proc/PID/stat``. Reading
another process races with its exit, so ``live_kilobytes`` turns a vanished process into 0.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["descendants", "live_kilobytes", "status_kilobytes"]


def status_kilobytes(field: str, pid: int | str = "self") -> int:
    """A memory line of ``/proc/PID/status`` (e.g. VmRSS, VmHWM) in kB; KeyError when absent."""
    status = f"/proc/{pid}/status"
    for line in Path(status).read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            number, unit = value.split()
            if unit != "kB":
                raise ValueError(f"unexpected unit in {line!r}")
            return int(number)
    raise KeyError(f"{field} is not in {status}")


def live_kilobytes(pid: int, field: str) -> int:
    """``status_kilobytes`` of a process that may have exited meanwhile (then 0)."""
    try:
        return status_kilobytes(field, pid)
    except (OSError, ValueError, KeyError):
        return 0


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, with its command line."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            )
        except (OSError, ValueError, IndexError):
            continue
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = commands.get(pid, "")
                frontier.append(pid)
    return found
