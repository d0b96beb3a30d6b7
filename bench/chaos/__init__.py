"""``python -m bench.chaos``: corral under faults an operator meets, measured (issue 10).

Four scenarios, each on servers of its own (valkey-server on free loopback ports, in temp dirs,
stopped at the end, also on Ctrl-C or an error), with worker and producer processes of
bench/chaos_agent.py:

- ``kill9``: workers (lock 2 s, stalled check 1 s) process jobs of 0.3 s, added at a pace
  they keep up with, while one of them is ``kill -9``'d every 1.5 s and replaced: jobs lost,
  completed twice (``completed`` events of the stream, kept whole), run twice, and the
  recovery time of each job whose worker was killed under it (kill -> its next run start on
  another worker; goal <= lock + 0.5 s). A recovered job goes to the back of wait, so with a
  backlog this would also count the wait behind it: hence the pace, under the capacity;
- ``outage``: the server (AOF) of an idle worker is stopped for 10 s, then 30 s, and started
  again on its port; once it answers PING another process adds a job: the time from PING to
  the processor's start (goal <= 0.5 s);
- ``crash``: 4 tasks add jobs ``{"seq": n}`` through a TCP proxy (tests/faults/proxy.py) to a
  server with ``appendfsync always`` that is ``kill -9``'d and restarted, and the proxy
  drops the connection of a reply now and then (the add ran, its caller never heard):
  acknowledged adds lost, seqs in two jobs, adds that raised. Adds are resent after an
  error: by corral (``add_retries=20``) where its AsyncQueue has the option, else by the
  producer itself, as users had to;
- ``retention``: server time per finish of a job with ``remove_on_complete=N`` (SLOWLOG of
  the finishing script) when the completed set holds 100 or 1,000,000 jobs.

The corral measured is a copy of ``<tree>/corral`` taken at start (``--tree``, default: the
tree ``import corral`` finds), first on the agents' PYTHONPATH; the report says which.

Options: ``--only NAME`` (repeatable, comma-separated; or names as arguments), ``--quick``
(tiny sizes, a smoke check), ``--json PATH``, ``--tree DIR``, ``--label TEXT``, ``--seed N``;
``--compare BEFORE.json NOW.json`` prints the before/now table of two reports.

The package: ``sizes`` (the two sets of sizes), ``processes`` (the servers and agent processes a
run starts, and the run that stops them), ``records`` (what the agents and the server leave
behind), ``figures`` (a scenario's figures), one module per scenario (``kill9``, ``outage``,
``crash``, ``retention``), ``report`` (the table, ``--compare``, the tree and load info) and
``__main__`` (the command line).
"""

from __future__ import annotations

from pathlib import Path

#: The source tree of the harness: on the agents' path (for bench.chaos_agent), and where
#: ``crash`` imports tests/faults/proxy.py from.
ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = Path(__file__).resolve().parent.parent / "results"
QUEUE = "chaos"
K = f"bull:{QUEUE}"
