"""Facts about this machine and this checkout, for build metadata and archives."""

from __future__ import annotations

import datetime as dt
import json
import platform
import socket
import subprocess

import psutil

from driver import paths
from driver.records import HostInfo


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> HostInfo:
    return HostInfo(
        hostname=socket.gethostname(),
        os=f"{platform.system()} {platform.release()}",
        cpu=_cpu_name(),
        logical_cores=psutil.cpu_count(logical=True) or 0,
        ram_gib=round(psutil.virtual_memory().total / (1 << 30), 1),
    )


def git_state() -> tuple[str, bool]:
    """(sha, dirty). A bundle carries the state it was built from in bundle.json."""
    if paths.is_bundle():
        data = json.loads(paths.BUNDLE_MARKER.read_text())
        return data["git_sha"], data["git_dirty"]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=paths.ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", True
    return (sha or "unknown"), bool(status.strip())


def commit_positions() -> dict[str, int]:
    """Every commit of HEAD's history (full sha) and its place in it, oldest first (`git rev-list --topo-order`):
    the order `history` puts archived runs in. Empty in a bundle (it carries no history) or without git."""
    if paths.is_bundle():
        return {}
    try:
        out = subprocess.run(["git", "rev-list", "--topo-order", "--reverse", "HEAD"], cwd=paths.ROOT,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {sha: i for i, sha in enumerate(out.split())}
