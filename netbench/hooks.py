"""Extension hooks, found through the ``netbench.hooks`` entry-point group and declared with
pluggy (the library pytest and pytest-benchmark declare theirs with), so a hook's name and
arguments are checked when it loads, not found missing when it never runs.

A hook is any object (a module will do) with some of the functions ``Spec`` declares:

    update_env(env: dict) -> None             add to every run's fingerprint, e.g. the switch
                                              port's firmware or the rack a host sits in
    case_finished(rows: list[dict]) -> None   each case's rows, once they are stored
    run_finished(rows: list[dict]) -> None    every row of the run, once the run is over

Plain functions with those names are hooks; so is anything marked ``@netbench.hooks.impl``.
A function whose name is one letter or two from a hook's (``case_finshed``), a marked one
no hook declares, or one taking an argument its hook does not pass is an error at load. A
hook that fails to load or to run is reported (``netbench list`` and the run's fallback lines
name it); it never stops a run, and rows are stored before any hook sees them.
"""

from __future__ import annotations

import difflib
import inspect
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

import pluggy

GROUP = "netbench.hooks"
PROJECT = "netbench"
spec = pluggy.HookspecMarker(PROJECT)
impl = pluggy.HookimplMarker(PROJECT)


class Spec:
    """The hooks netbench calls, with the arguments each is passed (by name)."""

    @spec
    def update_env(self, env: dict[str, Any]) -> None:
        """Add a site's own facts to the run's environment fingerprint, in place."""

    @spec
    def case_finished(self, rows: list[dict[str, Any]]) -> None:
        """One case's rows, once they are stored."""

    @spec
    def run_finished(self, rows: list[dict[str, Any]]) -> None:
        """Every row of the run, once the run is over."""


NAMES = tuple(n for n, f in vars(Spec).items() if callable(f) and not n.startswith("_"))


class _Manager(pluggy.PluginManager):
    """Takes a hook's plain functions by name, as well as marked ones (a site's hook written
    before the markers existed needs no change)."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name in NAMES and inspect.isroutine(getattr(plugin, name, None)):
            return {}
        return opts


def problems(hook: Any) -> list[str]:
    """What is wrong with a hook object, one line each: a public function named one letter or
    two from a declared hook (a typo), a hook function taking an argument netbench never
    passes, a marked function no hook declares."""
    out = []
    marked = f"{PROJECT}_impl"
    for name in dir(hook):
        fn = getattr(hook, name, None)
        if name.startswith("_") or not inspect.isroutine(fn):
            continue
        if name in NAMES:
            wanted = _required(getattr(Spec, name))
            extra = [a for a in _required(fn) if a not in wanted]
            if extra:
                out.append(f"{name} takes {', '.join(extra)}, which netbench never passes "
                           f"(it passes {', '.join(wanted)})")
        elif hasattr(fn, marked):
            out.append(f"{name} is marked as a hook and none is declared by that name "
                       f"(declared: {', '.join(NAMES)})")
        else:
            close = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.85)
            if close:
                out.append(f"{name} is no hook (did you mean {close[0]}?)")
    return out


def manager(named: list[tuple[str, Any]]) -> tuple[pluggy.PluginManager, list[str]]:
    """A plugin manager holding each (name, hook) that checks out, and one message per hook
    that does not."""
    pm = _Manager(PROJECT)
    pm.add_hookspecs(Spec)
    broken = []
    for name, hook in named:
        wrong = problems(hook)
        try:
            if wrong:
                raise pluggy.PluginValidationError(hook, "; ".join(wrong))
            pm.register(hook, name=name)
            pm.check_pending()      # a marked function no hook declares
        except (pluggy.PluginValidationError, ValueError) as exc:
            if pm.is_registered(hook):
                pm.unregister(hook)
            broken.append(f"hook {name} failed to load: {_why(exc)}")
    return pm, broken


def _required(fn: Any) -> list[str]:
    """A function's arguments without defaults, ``self`` left out (a spec is a method)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.name != "self"
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _why(exc: Exception) -> str:
    return " ".join(str(exc).split())


@lru_cache(maxsize=1)
def load() -> tuple[tuple[tuple[str, Any], ...], tuple[str, ...], pluggy.PluginManager]:
    """(name, hook) pairs that loaded and check out, one message per hook that did not, and
    the plugin manager holding them."""
    found, broken = [], []
    for ep in entry_points(group=GROUP):
        try:
            found.append((ep.name, ep.load()))
        except Exception as exc:        # a broken hook must not break netbench
            broken.append(f"hook {ep.name} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}")
    pm, invalid = manager(found)
    hooks = tuple((n, h) for n, h in found if pm.is_registered(h))
    return hooks, (*broken, *invalid), pm


def call(method: str, *args: Any) -> list[str]:
    """Call the declared hook ``method`` on every hook that has it, each on its own (one that
    raises neither stops the others nor the run); returns what went wrong, one line each
    (hooks that failed to load are ``load()[1]``)."""
    caller = getattr(load()[2].hook, method)     # AttributeError: no such hook is declared
    argnames = caller.spec.argnames
    kwargs = dict(zip(argnames, args))
    errors = []
    for hookimpl in reversed(caller.get_hookimpls()):      # in registration order
        try:
            hookimpl.function(*[kwargs[a] for a in hookimpl.argnames])
        except Exception as exc:
            errors.append(f"hook {hookimpl.plugin_name}.{method} failed: "
                          f"{type(exc).__name__}: {exc}")
    return errors
