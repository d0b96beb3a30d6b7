"""Processors named ``"package.module:function"``: importing one, and naming a function so a
child process can import it. Both fail at the worker's start with one line that says why,
never at the first job."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.errors import InvalidOptionError, ProcessorImportError
from corral.options import int_option


def check_spec(spec: Any) -> str:
    """``spec`` when it reads ``"package.module:function"`` (names that are identifiers).

    Raises:
        ProcessorImportError: anything else.
    """
    if not isinstance(spec, str):
        raise ProcessorImportError(
            f"processor must be a 'package.module:function' string, got {type(spec).__name__}"
        )
    module, sep, attr = spec.partition(":")
    names = [*module.split("."), *attr.split(".")]
    if not sep or not all(name.isidentifier() for name in names):
        raise ProcessorImportError(f"processor must be 'package.module:function', got {spec!r}")
    return spec


def import_processor(spec: str) -> Callable[..., Any]:
    """The callable that ``spec`` (``"package.module:function"``) names.

    Modules in the current directory are importable, as with ``python -m`` and uvicorn.

    Raises:
        ProcessorImportError: not ``module:function``, the module cannot be imported (the
            message names it and gives the import error), no such attribute, not callable.
    """
    module_name, _, attr = check_spec(spec).partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or whatever the module raised as it ran
        raise ProcessorImportError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ProcessorImportError(
                f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(target):
        raise ProcessorImportError(f"{spec!r} is {type(target).__name__}, not a function")
    return target  # type: ignore[no-any-return]


def spec_of(function: Callable[..., Any]) -> str:
    """The ``"module:qualname"`` a child process imports ``function`` by.

    Raises:
        ProcessorImportError: ``function`` cannot be found again by that name: a lambda, a
            closure, a bound method, a function of the script being run (``__main__``, unless
            it runs with ``python -m``), or a name that imports to something else.
    """
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise ProcessorImportError(
            "processes= needs 'package.module:function' or an importable function, got "
            f"{type(function).__name__}"
        )
    if "<" in qualname or hasattr(function, "__self__"):  # <lambda>, <locals>, a method
        raise ProcessorImportError(
            f"processes= needs an importable function: {qualname} cannot be imported by name "
            "in a child process (a lambda, a closure or a bound method); use a function "
            "defined at a module's top level"
        )
    if module == "__main__":
        main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if main_spec is None or main_spec.name == "__main__":
            raise ProcessorImportError(
                f"processes= cannot import {qualname} from the script being run (__main__) in "
                "a child process: move it to a module, or run with python -m"
            )
        module = main_spec.name
    spec = check_spec(f"{module}:{qualname}")
    try:
        found = import_processor(spec)
    except ProcessorImportError:
        found = None
    if found is not function:
        raise ProcessorImportError(
            f"processes= needs an importable function, but {spec!r} does not import back "
            f"to {qualname}"
        )
    return spec


@dataclass(frozen=True, slots=True)
class ProcessOptions:
    """A worker's ``processes=`` settings, checked: what its child processes import and how
    they are limited."""

    spec: str
    size: int
    max_memory_mb: int | None
    max_jobs_per_child: int | None

    @classmethod
    def build(
        cls,
        processor: Callable[..., Any] | None,
        spec: str | None,
        processes: int | None,
        max_memory_mb: int | None,
        max_jobs_per_child: int | None,
    ) -> ProcessOptions | None:
        """``None`` without ``processes``; else the settings, or the error that says why not.

        Raises:
            InvalidOptionError: a bad number, or a child setting without ``processes``.
            ProcessorImportError: the processor cannot be imported by a child.
        """
        if processes is None:
            for name, value in (
                ("max_memory_mb", max_memory_mb),
                ("max_jobs_per_child", max_jobs_per_child),
            ):
                if value is not None:
                    raise InvalidOptionError(f"{name} needs processes= (child processes)")
            return None
        size = int_option("processes", processes, 1, 1024)
        if processor is None:
            raise InvalidOptionError("processes= needs a processor")
        return cls(
            spec or spec_of(processor),
            size,
            None if max_memory_mb is None else int_option("max_memory_mb", max_memory_mb, 1),
            None
            if max_jobs_per_child is None
            else int_option("max_jobs_per_child", max_jobs_per_child, 1),
        )
