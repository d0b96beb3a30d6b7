"""``python manage.py corral_worker [QUEUE]``: ``corral worker`` for a queue of
``settings.CORRAL['queues']``, with Django set up (the processor may use the ORM)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from corral.django import corral_settings, processor_of
from corral.errors import InvalidOptionError

#: Options passed through to ``corral worker`` (argparse dest -> its flag).
PASSED_ON = {
    "concurrency": "--concurrency",
    "name": "--name",
    "processes": "--processes",
    "timeout": "--timeout",
    "burst_wait": "--burst-wait",
    "max_jobs": "--max-jobs",
    "max_time": "--max-time",
    "log_level": "--log-level",
    "log_format": "--log-format",
}
#: The type of each passed-on option that is not seconds.
KINDS: dict[str, type] = {
    "concurrency": int,
    "processes": int,
    "max_jobs": int,
    "name": str,
    "log_level": str,
    "log_format": str,
}


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = (
        "Run the processor settings.CORRAL['queues'] names for QUEUE until SIGINT or SIGTERM "
        "(or, with --burst, until the queue is drained); the options are corral worker's."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "queue", nargs="?", help="a queue of settings.CORRAL['queues'] (optional if one)"
        )
        parser.add_argument("--burst", action="store_true", help="exit once drained")
        parser.add_argument("--fail-on-job-failure", action="store_true")
        for dest, flag in PASSED_ON.items():
            parser.add_argument(flag, dest=dest, type=KINDS.get(dest, float), default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        from corral.cli_worker import worker_command

        try:
            config = corral_settings()
            queue = options["queue"] or only_queue(config["queues"])
            processor = processor_of(queue)
        except InvalidOptionError as exc:
            raise CommandError(str(exc)) from None
        argv = [processor, "--queue", queue, "--prefix", config["prefix"]]
        if config["url"]:
            argv += ["--url", config["url"]]
        for flag in ("burst", "fail_on_job_failure"):
            if options[flag]:
                argv.append("--" + flag.replace("_", "-"))
        for dest, flag in PASSED_ON.items():
            if options[dest] is not None:
                argv += [flag, str(options[dest])]
        # corral's own command does the rest (signals, logging, the banner and the summary).
        # Its exit status is the command's; a clean end returns, so call_command() does too.
        try:
            worker_command.main(argv, prog_name="manage.py corral_worker", standalone_mode=True)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise


def only_queue(queues: dict[str, str]) -> str:
    if len(queues) == 1:
        return next(iter(queues))
    configured = ", ".join(sorted(queues)) or "none"
    raise InvalidOptionError(f"name the queue to work on (settings.CORRAL['queues']: {configured})")
