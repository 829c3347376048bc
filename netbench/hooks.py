"""Extension hooks, found through the ``netbench.hooks`` entry-point group and declared with
pluggy (the library pytest and pytest-benchmark declare theirs with), so a hook's name and
arguments are checked when it loads, not found missing when it never runs.

A hook is any object (a module will do) with some of the functions ``Spec`` declares:

    update_env(env: dict) -> None             add to every run's fingerprint, e.g. the switch
                                              port's firmware or the rack a host sits in
    case_finished(rows: list[dict]) -> None   each case's rows, once they are stored
    run_finished(rows: list[dict]) -> None    every row of the run, once the run is over

Plain callables with those names are hooks, passed the arguments by position (any names);
so is anything marked ``@netbench.hooks.impl`` (by name, as pluggy passes them; ``specname``
counted). A callable whose name is one letter or two from a hook's (``case_finshed``), a
marked one no hook declares, or one that cannot take the arguments its hook passes is an
error at load. A
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


def _spec_args(name: str) -> list[str]:
    params = inspect.signature(getattr(Spec, name)).parameters
    return [p for p in params if p != "self"]


def plain(hook: Any) -> dict[str, Any]:
    """A hook's unmarked callables named as a declared hook: called with the spec's
    arguments by position, as before the hooks were declared (any argument names)."""
    out = {}
    for name in NAMES:
        try:
            fn = getattr(hook, name, None)
        except Exception:       # noqa: BLE001 - a property that raises: problems() says so
            continue
        if callable(fn) and not hasattr(fn, f"{PROJECT}_impl"):
            out[name] = fn
    return out


def problems(hook: Any) -> list[str]:
    """What is wrong with a hook object, one line each: a public callable named one letter or
    two from a declared hook (a typo), a hook callable that cannot take the arguments netbench
    passes, a marked function no hook declares (pluggy's ``specname`` counted)."""
    out = []
    marked = f"{PROJECT}_impl"
    for name in dir(hook):
        if name.startswith("_"):
            continue
        try:
            fn = getattr(hook, name, None)
        except Exception as exc:    # noqa: BLE001 - a hook object's own property failing
            out.append(f"reading {name} failed: {type(exc).__name__}: {exc}")
            continue
        if not callable(fn):
            continue
        opts = getattr(fn, marked, None)
        if isinstance(opts, dict):
            if (opts.get("specname") or name) not in NAMES:
                out.append(f"{name} is marked as a hook and none is declared by that name "
                           f"(declared: {', '.join(NAMES)})")
        elif name in NAMES:
            wanted = _spec_args(name)
            try:
                inspect.signature(fn).bind(*wanted)
            except TypeError:
                out.append(f"{name}{_signature(fn)} cannot be called with what netbench "
                           f"passes ({', '.join(wanted)})")
            except ValueError:
                pass                # no signature to read (a builtin): called as it is
        else:
            close = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.85)
            if close:
                out.append(f"{name} is no hook (did you mean {close[0]}?)")
    return out


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def manager(named: list[tuple[str, Any]]) -> tuple[pluggy.PluginManager, list[str]]:
    """A plugin manager holding each (name, hook) that checks out (its marked functions as
    pluggy hook implementations), and one message per hook that does not."""
    pm = pluggy.PluginManager(PROJECT)
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
    """Call the declared hook ``method`` on every hook that has it, in load order, each on
    its own (one that raises neither stops the others nor the run); returns what went wrong,
    one line each (hooks that failed to load are ``load()[1]``). A plain function gets the
    arguments by position; a marked one by name, as pluggy passes them."""
    hooks, _, pm = load()
    caller = getattr(pm.hook, method)        # AttributeError: no such hook is declared
    kwargs = dict(zip(caller.spec.argnames, args))
    marked: dict[str, list[Any]] = {}
    for impl_ in caller.get_hookimpls():     # registration order
        marked.setdefault(impl_.plugin_name, []).append(impl_)
    errors = []
    for name, hook in hooks:
        fn = plain(hook).get(method)
        calls = [(fn, args)] if fn is not None else []
        calls += [(i.function, [kwargs[a] for a in i.argnames]) for i in marked.get(name, [])]
        for function, passed in calls:
            try:
                function(*passed)
            except Exception as exc:
                errors.append(f"hook {name}.{method} failed: {type(exc).__name__}: {exc}")
    return errors
