"""The ``crash`` scenario: adds through a fault proxy to a server (``appendfsync always``)
that is ``kill -9``'d and restarted, with replies lost now and then; acknowledged adds lost,
duplicates, adds that raised."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from typing import Any

from bench.chaos import ROOT, K
from bench.chaos.figures import figure
from bench.chaos.processes import Agent, Run, Valkey
from bench.chaos.records import tracebacks
from bench.chaos.sizes import Sizes


def crash(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.faults.proxy import FaultProxy

    srv = Valkey(run, aof=True, fsync="always")
    srv.start()
    proxy = FaultProxy(srv.port).start()

    def quiet(loop: Any, context: dict[str, Any]) -> None:
        # Stopping the proxy cancels its connection tasks: not worth a traceback.
        if not isinstance(context.get("exception"), asyncio.CancelledError):
            loop.default_exception_handler(context)

    proxy._loop.call_soon_threadsafe(proxy._loop.set_exception_handler, quiet)
    run.cleanups.append(proxy.stop)
    adder = Agent(run, "adder", proxy.url, tasks=sz.crash_tasks, add_retries=sz.crash_add_retries)
    if adder.read_line(60) != "READY":
        raise RuntimeError(f"adder did not start:\n{adder.stderr()}")
    faults: list[tuple[str, float]] = []
    t0 = time.time()
    time.sleep(sz.crash_gap)
    for _ in range(sz.crash_rounds):
        faults.append(("kill -9 server", time.time() - t0))
        srv.kill9()
        # The kernel resets a killed server's connections; the proxy would keep the client
        # side open (a half-open peer, a fault of another kind): reset them as well.
        proxy.drop()
        time.sleep(sz.crash_down)
        srv.start()
        time.sleep(sz.crash_gap)
        faults.append(("lost reply", time.time() - t0))
        proxy.lose_replies(1)
        time.sleep(sz.crash_gap)
    adder.send("STOP")
    out = adder.read_json(120)
    run.check_corral(out["corral"])
    replies_not_lost = proxy._replies_to_lose  # a lose_replies that found no reply to drop

    c = srv.client()
    top = int(c.get(f"{K}:id") or 0)
    seqs: Counter[int] = Counter()
    for low in range(1, top + 1, 5000):
        pipe = c.pipeline(transaction=False)
        for i in range(low, min(top, low + 4999) + 1):
            pipe.hget(f"{K}:{i}", "data")
        for data in pipe.execute():
            if data is not None:
                seqs[int(json.loads(data)["seq"])] += 1
    acked = set(out["acked"])
    raised = {int(s): e for s, e in out["raised"]}
    met = set(out["met_errors"])
    lost = sorted(acked - set(seqs))
    dups = {s: n for s, n in seqs.items() if n > 1}
    created_after_raise = sorted(set(raised) & set(seqs))
    if "add_retries" in out["queue_options"]:
        retries = f"corral: add_retries={out['queue_options']['add_retries']}"
    else:
        retries = f"the producer's own: up to {out['app_resends']} resends"
    lost_replies = sz.crash_rounds - replies_not_lost
    figures = [
        figure("server kill -9 + restart, lost replies", [sz.crash_rounds, lost_replies]),
        figure("producer retries", retries),
        figure("adds acknowledged", len(acked)),
        figure("acked adds lost", len(lost), "0", not lost),
        figure("duplicates (seq in > 1 job)", len(dups), "0", not dups),
        figure("adds that met an error (resent)", len(met)),
        figure("adds that raised in the end", len(raised)),
        figure("  of which created a job anyway", len(created_after_raise)),
    ]
    return {
        "figures": figures,
        "details": {
            "faults": faults,
            "jobs": sum(seqs.values()),
            "lost_seqs": lost[:50],
            "duplicate_seqs": dict(list(dups.items())[:50]),
            "raised_errors": dict(Counter(raised.values())),
            "created_after_raise": created_after_raise[:50],
            "proxy_connections": proxy.accepted,
            "lost_reply_requests_unused": replies_not_lost,
            "adder_stderr_tail": adder.stderr()[-1500:],
            "adder_tracebacks": tracebacks([adder]),
        },
    }
