"""The check of the ``<!-- fragment -->`` blocks of docs/*.md (tests/test_doc_blocks.py says
what it checks): a walk over the block's syntax tree that follows what its names stand for,
and reports the corral names, methods, attributes and keyword arguments that do not exist."""

from __future__ import annotations

import ast
import collections.abc
import importlib
import inspect
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any

import corral

# Worker(...) may make the workers of these modules (see class_keywords).
import corral._lanes
import corral._sharded_worker

#: What a name that a fragment uses without binding it stands for.
CONTEXT: dict[str, type] = {
    "queue": corral.AsyncQueue,
    "job": corral.AsyncJob,
    "worker": corral.Worker,
    "flows": corral.AsyncFlowProducer,
}


@dataclass(frozen=True)
class Instance:
    """An object of a corral class, in a block."""

    cls: type


@dataclass(frozen=True)
class Items:
    """What iterating over a list (or an iterator) of a corral class gives."""

    cls: type


@dataclass(frozen=True)
class Method:
    """``obj.name`` of an :class:`Instance`, to be called."""

    cls: type
    name: str


#: A name the block binds to something this check does not follow.
UNKNOWN = object()


def compile_block(code: str, name: str) -> ast.Module:
    """The fragment's syntax tree: compiled dedented, with ``await`` allowed at top level,
    and as the body of a function when it returns (an excerpt of one)."""
    source = textwrap.dedent(code)
    try:
        compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        if "outside function" not in str(exc):
            raise
        source = "async def excerpt():\n" + textwrap.indent(source, "    ")
        compile(source, name, "exec")
    return ast.parse(source)


def check_fragment(code: str, name: str = "<block>") -> list[str]:
    """What is wrong with the corral names of ``code`` (an empty list: nothing); raises
    SyntaxError when it does not compile."""
    checker = Checker(name)
    checker.visit(compile_block(code, name))
    return checker.problems


def is_corral(obj: Any) -> bool:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return isinstance(module, str) and (module == "corral" or module.startswith("corral."))


def has_attribute(cls: type, attr: str) -> bool:
    """Whether objects of ``cls`` have ``attr``: a class attribute, an annotated field, or an
    attribute its code sets on ``self``."""
    if hasattr(cls, attr) or any("__getattr__" in vars(k) for k in cls.__mro__[:-1]):
        return True
    for klass in cls.__mro__:
        if attr in getattr(klass, "__annotations__", {}):
            return True
        if klass is not object and is_corral(klass):
            try:
                source = inspect.getsource(klass)
            except (OSError, TypeError):
                continue
            if re.search(rf"\bself\.{re.escape(attr)}\s*(:[^=\n]*)?=(?!=)", source):
                return True
    return False


def keywords_of(func: Any, *, forwarded: bool = False) -> set[str] | None:
    """The keyword names ``func`` takes, or ``None`` when it takes any (``**kwargs``); a
    ``**kwargs: Unpack[SomeTypedDict]`` takes the TypedDict's keys. With ``forwarded``, a
    plain ``**kwargs`` adds nothing (they go on to a function checked on its own)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    names: set[str] = set()
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            names.add(param.name)
        elif param.kind is param.VAR_KEYWORD:
            try:
                hint = typing.get_type_hints(func, include_extras=True).get(param.name)
            except Exception:
                hint = None
            args = typing.get_args(hint)
            if len(args) == 1 and typing.is_typeddict(args[0]):
                names |= args[0].__required_keys__ | args[0].__optional_keys__
            elif not forwarded:
                return None
    return names


def descendants(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *descendants(sub)]
    return found


def class_keywords(cls: type) -> set[str] | None:
    """The keywords ``cls(...)`` takes: its ``__init__``'s, and when its own ``__new__`` may
    make a subclass instead (``Worker({...})`` is a lanes worker), those of its subclasses
    (whose ``**kwargs`` go on to the class's own ``__init__``; their modules are imported
    above, so that ``__subclasses__`` knows them)."""
    if cls.__init__ is object.__init__:
        return keywords_of(cls)
    found = keywords_of(cls.__init__)
    if found is not None and "__new__" in vars(cls):
        for sub in descendants(cls):
            found |= keywords_of(sub.__init__, forwarded=True) or set()
    return found


#: Annotations whose one argument is the type of the items a ``for`` gets.
ITERABLES = (
    list,
    tuple,
    collections.abc.Sequence,
    collections.abc.Iterable,
    collections.abc.Iterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncIterator,
)


def known(hint: Any) -> Any:
    """What an annotation says of a value: an :class:`Instance` of a corral class (``X | None``
    counts as ``X``, ``Generic[T]`` as ``Generic``), :class:`Items` of one, or UNKNOWN."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = options[0] if len(options) == 1 else None
    origin = typing.get_origin(hint)
    if origin in ITERABLES and len(typing.get_args(hint)) == 1:
        item = known(typing.get_args(hint)[0])
        return Items(item.cls) if isinstance(item, Instance) else UNKNOWN
    if isinstance(origin, type) and is_corral(origin):
        hint = origin
    if isinstance(hint, type) and is_corral(hint):
        return Instance(hint)
    return UNKNOWN


def hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # a name imported for type checking only
        return {}


class Checker(ast.NodeVisitor):
    """Walks a block in source order, following what its names stand for."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.names: dict[str, Any] = {}
        self.problems: list[str] = []

    def problem(self, node: ast.AST, text: str) -> None:
        line = f"{self.name} line {getattr(node, 'lineno', '?')}: {text}"
        if line not in self.problems:
            self.problems.append(line)

    # -- bindings ----------------------------------------------------------------------------

    def bind(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.names[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, UNKNOWN)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, UNKNOWN)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name != "corral" and not alias.name.startswith("corral."):
                self.names[(alias.asname or alias.name).split(".")[0]] = UNKNOWN
                continue
            try:
                module = importlib.import_module(alias.name)
            except ImportError as exc:
                self.problem(node, f"import {alias.name}: {exc}")
                module = UNKNOWN
            if alias.asname:
                self.names[alias.asname] = module
            else:
                self.names["corral"] = corral

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module_name = node.module or ""
        if node.level or not (module_name == "corral" or module_name.startswith("corral.")):
            for alias in node.names:
                self.names[alias.asname or alias.name] = UNKNOWN
            return
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            self.problem(node, f"from {module_name} import ...: {exc}")
            return
        for alias in node.names:
            found = self.member(node, module, alias.name)
            self.names[alias.asname or alias.name] = UNKNOWN if found is None else found

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.resolve(node.value)
        for target in node.targets:
            self.visit(target)
            self.bind(target, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        value = self.resolve(node.value) if node.value is not None else UNKNOWN
        annotated = self.annotation(node.annotation)
        self.bind(node.target, annotated if annotated is not UNKNOWN else value)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        items = self.resolve(node.iter)
        self.bind(node.target, Instance(items.cls) if isinstance(items, Items) else UNKNOWN)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            value = self.resolve(item.context_expr)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, value if isinstance(value, Instance) else UNKNOWN)
        for statement in node.body:
            self.visit(statement)

    visit_AsyncWith = visit_With  # type: ignore[assignment]

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.resolve(decorator)
        self.names[node.name] = UNKNOWN
        arguments = node.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            typed = self.annotation(arg.annotation) if arg.annotation is not None else UNKNOWN
            if typed is not UNKNOWN or arg.arg not in CONTEXT:
                self.names[arg.arg] = typed
        for extra in (arguments.vararg, arguments.kwarg):
            if extra is not None:
                self.names[extra.arg] = UNKNOWN
        for default in [*arguments.defaults, *arguments.kw_defaults]:
            if default is not None:
                self.resolve(default)
        for statement in node.body:
            self.visit(statement)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.names[node.name] = UNKNOWN
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.resolve(node.type)
        if node.name:
            self.names[node.name] = UNKNOWN
        for statement in node.body:
            self.visit(statement)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.bind(node.target, self.resolve(node.value))

    def visit_comprehension(self, node: ast.comprehension) -> None:
        items = self.resolve(node.iter)
        self.bind(node.target, Instance(items.cls) if isinstance(items, Items) else UNKNOWN)
        for condition in node.ifs:
            self.resolve(condition)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for arg in node.args.args:
            if arg.arg not in CONTEXT:
                self.names[arg.arg] = UNKNOWN
        self.resolve(node.body)

    # -- uses --------------------------------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            self.resolve(node)
        else:
            self.resolve(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        self.resolve(node)

    def visit_Name(self, node: ast.Name) -> None:
        pass

    def annotation(self, node: ast.AST | None) -> Any:
        """An :class:`Instance` of the corral class an annotation names, else UNKNOWN."""
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return UNKNOWN
        found = self.resolve(node)
        return Instance(found) if isinstance(found, type) and is_corral(found) else UNKNOWN

    def member(self, node: ast.AST, owner: Any, attr: str) -> Any:
        """``owner.attr`` for a corral module or class (reported when missing), else None."""
        if hasattr(owner, attr):
            return getattr(owner, attr)
        if isinstance(owner, types.ModuleType):
            try:
                return importlib.import_module(f"{owner.__name__}.{attr}")
            except ImportError:
                pass
        label = owner.__name__ if isinstance(owner, (type, types.ModuleType)) else repr(owner)
        self.problem(node, f"{label} has no {attr!r}")
        return None

    def resolve(self, node: ast.AST) -> Any:
        """What ``node`` evaluates to when it is a corral object, else UNKNOWN; reports the
        corral names it uses that do not exist."""
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return self.names[node.id]
            if node.id == "corral":
                return corral
            if node.id in corral.__all__:
                return getattr(corral, node.id)
            if node.id in CONTEXT:
                return Instance(CONTEXT[node.id])
            return UNKNOWN
        if isinstance(node, ast.Attribute):
            owner = self.resolve(node.value)
            if isinstance(owner, Instance):
                if not has_attribute(owner.cls, node.attr):
                    self.problem(node, f"a {owner.cls.__name__} has no {node.attr!r}")
                    return UNKNOWN
                if callable(getattr(owner.cls, node.attr, None)):
                    return Method(owner.cls, node.attr)
                return known(hints(owner.cls).get(node.attr))
            if (isinstance(owner, (type, types.ModuleType))) and is_corral(owner):
                found = self.member(node, owner, node.attr)
                return UNKNOWN if found is None else found
            return UNKNOWN
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            for arg in node.args:
                self.resolve(arg)
            for keyword in node.keywords:
                self.resolve(keyword.value)
            return self.call(node, func)
        if isinstance(node, ast.Await):
            return self.resolve(node.value)
        for child in ast.iter_child_nodes(node):
            self.visit(child)
        return UNKNOWN

    def call(self, node: ast.Call, func: Any) -> Any:
        """Check the keywords of a call to a corral callable; what it returns."""
        if isinstance(func, Method):
            target: Any = getattr(func.cls, func.name)
            label = f"{func.cls.__name__}.{func.name}"
            accepted = keywords_of(target)
        elif isinstance(func, type) and is_corral(func):
            target, label = func, func.__name__
            accepted = class_keywords(func)
        elif callable(func) and is_corral(func):
            target, label = func, getattr(func, "__qualname__", repr(func))
            accepted = keywords_of(func)
        else:
            return UNKNOWN
        if accepted is not None:
            for keyword in node.keywords:
                if keyword.arg is not None and keyword.arg not in accepted:
                    self.problem(node, f"{label}() takes no keyword {keyword.arg!r}")
        if isinstance(target, type):
            return Instance(target)
        return known(hints(target).get("return"))
