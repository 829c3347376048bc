"""Hooks are declared (pluggy hookspecs): a hook's name and arguments are checked at load, so
a misspelt hook is an error that `netbench list` names, not a function that never runs; a
hook written before the declarations (any argument names, positional) still runs."""

from __future__ import annotations

import functools
import types

import pytest

from netbench import hooks


def _module(name: str = "site_hooks", **functions) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, fn in functions.items():
        setattr(mod, key, fn)
    return mod


def _call(monkeypatch, named, method, *args):
    """hooks.call over these hooks, as load() would hold them."""
    pm, broken = hooks.manager(named)
    loaded = tuple((n, h) for n, h in named if pm.is_registered(h))
    monkeypatch.setattr(hooks, "load", lambda: (loaded, tuple(broken), pm))
    return broken, hooks.call(method, *args)


def test_plain_callables_of_any_argument_names_run_in_load_order(monkeypatch):
    seen = []

    class Shipper:                          # a callable object, not a function
        def __call__(self, rows):
            seen.append(("object", rows))

    named = [("first", _module(case_finished=lambda case_rows: seen.append(("a", case_rows)))),
             ("second", _module(case_finished=lambda *a: seen.append(("b", a)))),
             ("third", _module(case_finished=Shipper())),
             ("fourth", _module(case_finished=functools.partial(
                 lambda tag, rows: seen.append((tag, rows)), "partial"))),
             ("fifth", _module(case_finished=lambda rows=None: seen.append(("c", rows))))]
    broken, errors = _call(monkeypatch, named, "case_finished", [1])
    assert broken == [] and errors == []
    assert seen == [("a", [1]), ("b", ([1],)), ("object", [1]), ("partial", [1]), ("c", [1])]


def test_a_marked_hook_is_called_by_name_and_specname_counts(monkeypatch):
    seen = []

    @hooks.impl(specname="run_finished")
    def ship(rows):
        seen.append(rows)

    broken, errors = _call(monkeypatch, [("site", _module(ship=ship))], "run_finished", [2])
    assert broken == [] and errors == [] and seen == [[2]]


def test_a_hook_that_raises_is_named_and_the_others_still_run(monkeypatch):
    seen = []

    def boom(rows):
        raise RuntimeError("the collector is down")

    named = [("bad", _module(case_finished=boom)),
             ("good", _module(case_finished=seen.append))]
    _, errors = _call(monkeypatch, named, "case_finished", [3])
    assert errors == ["hook bad.case_finished failed: RuntimeError: the collector is down"]
    assert seen == [[3]]


def test_a_misspelt_hook_is_an_error_at_load_naming_the_hook_it_meant():
    pm, broken = hooks.manager([("site", _module(case_finshed=lambda rows: None))])
    assert broken == ["hook site failed to load: case_finshed is no hook (did you mean "
                      "case_finished?)"], broken
    assert pm.get_plugin("site") is None


def test_a_hook_that_cannot_take_what_netbench_passes_is_an_error_at_load():
    pm, broken = hooks.manager([("site", _module(run_finished=lambda rows, when: None))])
    assert broken == ["hook site failed to load: run_finished(rows, when) cannot be called "
                      "with what netbench passes (rows)"], broken
    assert pm.get_plugin("site") is None


def test_a_marked_function_no_hook_declares_is_an_error_and_other_hooks_still_load():
    @hooks.impl
    def case_started(rows):
        pass

    pm, broken = hooks.manager([("odd", _module(case_started=case_started)),
                                ("fine", _module(update_env=lambda env: None))])
    assert broken == ["hook odd failed to load: case_started is marked as a hook and none is "
                      "declared by that name (declared: update_env, case_finished, "
                      "run_finished)"], broken
    assert pm.get_plugin("odd") is None and pm.get_plugin("fine") is not None


def test_a_hook_object_whose_attribute_raises_is_reported_not_fatal():
    class Odd:
        @property
        def broken_prop(self):
            raise RuntimeError("no config")

    pm, broken = hooks.manager([("odd", Odd())])
    assert broken == ["hook odd failed to load: reading broken_prop failed: RuntimeError: "
                      "no config"], broken


def test_only_declared_hooks_can_be_called():
    with pytest.raises(AttributeError):
        hooks.call("case_finshed", [])
