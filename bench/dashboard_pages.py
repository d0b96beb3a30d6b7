"""The time to render a page of a big failed set through the real dashboard, timed by a client.

``python -m bench.dashboard_pages [--failed 1000000] [--pages 1,10000,20000] [--runs 21]``
starts its own valkey-server (as ``make bench`` does), writes ``--failed`` failed jobs of queue
``pages`` straight into BullMQ's layout (:func:`bench.dashboard.seed`: hashes with ~200 bytes
of data, their ids in the ``failed`` zset, with pipelines), then starts ``corral dashboard``
as a subprocess on a free port and GETs each page with a bearer token over HTTP (one
keep-alive connection, as a browser tab). Each figure is the wall time of a full request
(headers and body read) measured by the client: the first request of each URL is a warm-up,
then ``--runs`` more give the median, p90 and max. It also times the overview (``/``) and the
queue's summary, which count the failed set.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

from bench.dashboard import seed
from bench.run import Server

TOKEN = "bench-token-0123456789abcdef"
QUEUE = "pages"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_dashboard(url: str, port: int) -> subprocess.Popen[bytes]:
    """``corral dashboard`` on ``port``; returns once it answers."""
    env = {**os.environ, "CORRAL_DASHBOARD_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral.cli", "dashboard", "--url", url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/login", timeout=1)
            return proc
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("corral dashboard did not start") from None
            time.sleep(0.05)


def timed(http: httpx.Client, path: str, runs: int) -> tuple[list[float], int]:
    """Wall times in ms of ``runs`` GETs of ``path`` (after one warm-up), and the body size."""
    size = len(http.get(path).raise_for_status().content)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        response = http.get(path)
        response.raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard_pages", description=__doc__)
    parser.add_argument("--failed", type=int, default=1_000_000)
    parser.add_argument("--pages", default="1,10000,20000", help="page numbers (50 jobs each)")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args(argv)
    numbers = [int(n) for n in args.pages.split(",") if n.strip()]
    srv = Server()
    proc = None
    try:
        started = time.perf_counter()
        seed(srv.client, QUEUE, args.failed, "failed", 200)
        memory = int(srv.client.info("memory")["used_memory"])
        print(
            f"seeded {args.failed:,} failed jobs in {time.perf_counter() - started:.0f} s "
            f"(server memory {memory / 2**20:.0f} MiB)"
        )
        port = free_port()
        proc = start_dashboard(srv.url, port)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            paths = [("overview", "/"), ("queue summary", f"/queues/{QUEUE}")]
            paths += [(f"failed page {n}", f"/queues/{QUEUE}/failed?page={n}") for n in numbers]
            for label, path in paths:
                times, size = timed(http, path, args.runs)
                p90 = times[int(0.9 * (len(times) - 1))]
                print(
                    f"  {label:<18} GET {path:<32} median {statistics.median(times):6.1f} ms, "
                    f"p90 {p90:6.1f} ms, max {times[-1]:6.1f} ms ({size / 1024:.0f} KiB)"
                )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
