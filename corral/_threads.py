"""The threads plain-function processors run in.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so one
job blocked forever keeps a worker process alive after its last signal: the process cannot
exit "at once" on a second SIGTERM. These threads are daemons: the worker decides how long to
wait for them (its leases keep their jobs' locks while they run), and an exit does not wait.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

_Item = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """Runs calls in up to ``max_workers`` daemon threads, made on demand and reused."""

    def __init__(self, max_workers: int, *, name: str = "corral-job") -> None:
        self.max_workers = max_workers
        self._name = name
        self._numbers = itertools.count(1)
        self._items: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: set[threading.Thread] = set()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot run a job after the thread pool was shut down")
            self._items.put((future, fn, args, kwargs))
            # A thread that is waiting for work takes it; otherwise start one, up to the cap.
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{next(self._numbers)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._items.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # SystemExit and KeyboardInterrupt are the job's
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, fn, args, kwargs  # free the job before waiting for the next
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; idle threads end, busy ones end when their call returns.

        ``wait`` joins them (never used by the worker, which waits on its leases instead).
        """
        with self._lock:
            self._shut = True
            threads = list(self._threads)
        for _ in threads:
            self._items.put(None)
        if wait:
            for thread in threads:
                thread.join()
