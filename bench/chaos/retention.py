"""The ``retention`` scenario: server time per finish of a job with
``remove_on_complete=N`` (SLOWLOG of the finishing script), with few or many completed jobs
retained."""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from typing import Any

from bench.chaos import K
from bench.chaos.figures import figure, stats
from bench.chaos.processes import Agent, Run, Valkey
from bench.chaos.records import read_records, ready_records, tracebacks, wait_ready
from bench.chaos.sizes import Sizes

#: Writes finished jobs ``ARGV[2]..ARGV[3]`` in BullMQ's layout (a hash, a member of
#: K:completed scored by finishedOn), as old as ``ARGV[4]`` ms + their number.
#: Surplus jobs one finish removes at most (RETENTION_BATCH in corral/_lua/include/remove.lua).
RETENTION_BATCH = 100

FILL = """
local prefix, first, last, base = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for i = first, last do
  local id = tostring(i)
  local ts = tostring(base + i)
  redis.call("HSET", prefix .. id, "name", "old", "data", "{}", "opts", '{"attempts":0}',
    "timestamp", ts, "delay", "0", "priority", "0", "processedOn", ts, "finishedOn", ts,
    "atm", "1", "ats", "1", "returnvalue", "null")
  redis.call("ZADD", prefix .. "completed", ts, id)
end
return last - first + 1
"""

FINISH_SCRIPTS = ("move_to_finished", "finish_jobs")


def _us(value: float | None) -> int | None:
    return None if value is None else round(value)


#: SLOWLOG keeps calls that took at least this long (us).
SLOWLOG_US = 10


def retention(run: Run, sz: Sizes, rng: random.Random) -> dict[str, Any]:
    srv = Valkey(run)
    srv.start()
    big = sz.retention_big
    cases = [
        (
            f"{sz.retention_small:,} retained, keep 10",
            sz.retention_small,
            10,
            sz.retention_finishes,
        ),
        (f"{big:,} retained, keep 10", big, 10, sz.retention_big_finishes),
        (f"{big:,} retained, keep {big:,}", big, big, sz.retention_finishes),
    ]
    results = []
    agents: list[Agent] = []
    for label, retained, keep, finishes in cases:
        c = srv.client()
        c.flushall()
        t = time.monotonic()
        base = int(time.time() * 1000) - 10 * big - 86_400_000
        for low in range(1, retained + 1, 20_000):
            c.eval(FILL, 0, f"{K}:", low, min(retained, low + 19_999), base)
        c.set(f"{K}:id", retained)
        fill_s = time.monotonic() - t
        producer = Agent(
            run, "produce", srv.url, count=finishes, opts=json.dumps({"remove_on_complete": keep})
        )
        producer.read_line(60)  # READY
        run.check_corral(producer.read_json(120)["corral"])
        # Valkey logs the commands a script runs too (a trimming finish runs 100 DELs): only
        # calls of 10 us or more are kept, which every finish takes (no inner command does,
        # mostly), and the count is checked against the jobs the worker ran.
        c.config_set("slowlog-log-slower-than", SLOWLOG_US)
        c.config_set("slowlog-max-len", 200_000)
        c.slowlog_reset()
        c.config_resetstat()
        c.config_set("latency-monitor-threshold", 100)
        c.execute_command("LATENCY", "RESET")
        records = run.tmpdir("records-")
        # Scripts loaded first, so that no NOSCRIPT reply counts as a finish.
        w = Agent(run, "worker", srv.url, records=records, concurrency=1, preload_scripts=1)
        agents.append(w)
        wait_ready(run, records, [w])
        t_start = time.monotonic()
        while time.monotonic() - t_start < sz.retention_budget_s:
            if sum(r.get("ev") == "end" for r in read_records(records)) >= finishes:
                break
            time.sleep(0.1)
        stats_now = c.info("commandstats")
        shas = ready_records(records)[w.pid]["scripts"]
        w.stop(30)
        ran = sum(r.get("ev") == "end" for r in read_records(records))
        finish_shas = {shas[name] for name in FINISH_SCRIPTS if name in shas}
        entries = sorted(c.slowlog_get(200_000), key=lambda e: e["id"])
        per_finish = []
        for e in entries:
            command = e["command"]
            parts = (command.decode() if isinstance(command, bytes) else command).split(" ", 2)
            if len(parts) > 1 and parts[0].upper() == "EVALSHA" and parts[1] in finish_shas:
                per_finish.append(int(e["duration"]))
        c.config_set("slowlog-log-slower-than", 10_000)
        latency = c.execute_command("LATENCY", "LATEST")
        evalsha = stats_now.get("cmdstat_evalsha", {})
        buckets = [
            round(statistics.fmean(per_finish[i : i + 100])) for i in range(0, len(per_finish), 100)
        ]
        s = stats([float(x) for x in per_finish])
        # The surplus is gone after (retained - keep) / 99 finishes (rounded up), plus a few.
        trimmed_after = -(-max(0, retained - keep) // (RETENTION_BATCH - 1)) + 5
        after = stats([float(x) for x in per_finish[trimmed_after:]])
        results.append(
            {
                "case": label,
                "retained": retained,
                "keep": keep,
                "fill_s": round(fill_s, 2),
                "finishes": len(per_finish),
                "jobs_run": ran,
                "finishes_wanted": finishes,
                "us_per_finish": {k: v for k, v in s.items() if k != "values"},
                "first_10_us": per_finish[:10],
                "last_10_us": per_finish[-10:],
                "slowest": sorted(enumerate(per_finish), key=lambda x: -x[1])[:5],
                "per_finish_us": per_finish,
                "mean_us_per_100": buckets,
                "after_trim_us": {k: v for k, v in after.items() if k != "values"},
                "evalsha_usec_per_call": evalsha.get("usec_per_call"),
                "evalsha_calls": evalsha.get("calls"),
                "completed_left": c.zcard(f"{K}:completed"),
                "latency_latest": latency,
            }
        )
        print(
            f"    retention {label}: {len(per_finish)} finishes, "
            f"median {s['p50']} us, max {s['max']} us",
            file=sys.stderr,
            flush=True,
        )
    figures = []
    small = results[0]["us_per_finish"]
    for res in results:
        u = res["us_per_finish"]
        trims = res["keep"] < res["retained"] - RETENTION_BATCH
        ok = None
        if res is not results[0] and small["p50"] and u["p50"] is not None and not trims:
            ok = u["p50"] <= 3 * small["p50"]
        figures.append(
            figure(
                f"{res['case']}: us/finish p50 (mean, max; n)",
                [_us(u["p50"]), _us(u.get("mean")), _us(u["max"]), res["finishes"]],
                "" if res is results[0] or trims else "~ as with 100",
                ok,
            )
        )
        if trims:
            # Each finish trims at most 100 surplus jobs: the first ones pay for the backlog,
            # and once it is gone a finish should cost what it costs with 100.
            after = res["after_trim_us"]
            figures.append(
                figure(f"{res['case']}: mean us/finish per 100 finishes", res["mean_us_per_100"])
            )
            figures.append(
                figure(
                    f"{res['case']}: us/finish p50 once trimmed (n)",
                    [_us(after["p50"]), after["n"]],
                    "~ as with 100",
                    None if after["p50"] is None else after["p50"] <= 3 * small["p50"],
                )
            )
    return {
        "figures": figures,
        "details": {"cases": results, "worker_tracebacks": tracebacks(agents)},
    }
