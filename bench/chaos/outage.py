"""The ``outage`` scenario: the server of an idle worker stopped for a while and started
again; the time from its first PONG to the start of a job added then."""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from bench.chaos.figures import figure
from bench.chaos.processes import Agent, Run, Valkey
from bench.chaos.records import first_start, tracebacks, wait_ready
from bench.chaos.sizes import Sizes


def outage(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    srv = Valkey(run, aof=True)
    srv.start()
    producer = Agent(run, "add-on-demand", srv.url)
    run.check_corral(producer.read_json(60)["corral"])

    def add(tag: str) -> dict[str, Any]:
        producer.send(f"ADD {tag}")
        out = producer.read_json(60)
        if out["id"] is None:
            raise RuntimeError(f"the producer could not add: {out}")
        return out

    measured: list[dict[str, Any]] = []
    agents: list[Agent] = []
    for r in range(1, sz.outage_runs + 1):
        for down in sz.outage_downs:
            records = run.tmpdir("records-")
            w = Agent(run, "worker", srv.url, records=records, drain_delay=sz.outage_drain_delay)
            agents.append(w)
            wait_ready(run, records, [w])
            warm = add(f"warm-{r}-{down:g}")
            if first_start(records, warm["id"], 10) is None:
                raise RuntimeError(f"the worker ran no job before the outage:\n{w.stderr()}")
            time.sleep(1.0)  # idle: blocked on the marker when the server goes
            srv.stop()
            time.sleep(down)
            t_ping = srv.start()
            job = add(f"after-{r}-{down:g}")
            t_run = first_start(records, job["id"], sz.outage_timeout)
            measured.append(
                {
                    "run": r,
                    "down_s": down,
                    "ping_to_start_s": None if t_run is None else t_run - t_ping,
                    "ping_to_acked_s": job["t_acked"] - t_ping,
                    "acked_to_start_s": None if t_run is None else t_run - job["t_acked"],
                    "add_tries": job["tries"],
                    "worker_alive": w.alive(),
                }
            )
            print(f"    outage {down:g}s run {r}: {measured[-1]}", file=sys.stderr, flush=True)
            w.stop()
    figures = []
    for down in sz.outage_downs:
        rows = [m for m in measured if m["down_s"] == down]
        values = [m["ping_to_start_s"] for m in rows]
        got = [v for v in values if v is not None]
        ok = len(got) == len(values) and all(v <= 0.5 for v in got)
        figures.append(
            figure(f"down {down:g}s: PING -> job started, s (each run)", values, "<= 0.5", ok)
        )
        figures.append(
            figure(
                f"down {down:g}s: job added -> started, s", [m["acked_to_start_s"] for m in rows]
            )
        )
    return {
        "figures": figures,
        "details": {"runs": measured, "worker_tracebacks": tracebacks(agents)},
    }
