"""Hooks are declared (pluggy hookspecs): a hook's name and arguments are checked at load, so
a misspelt hook is an error that `netbench list` names, not a function that never runs."""

from __future__ import annotations

import types

from netbench import hooks


def _module(**functions) -> types.ModuleType:
    mod = types.ModuleType("site_hooks")
    for name, fn in functions.items():
        setattr(mod, name, fn)
    return mod


def test_a_plain_function_named_as_a_hook_is_called_with_its_arguments():
    seen = []
    pm, broken = hooks.manager([("site", _module(case_finished=lambda rows: seen.append(rows),
                                                 helper=lambda: None))])
    assert broken == [] and pm.is_registered(pm.get_plugin("site"))
    (impl,) = pm.hook.case_finished.get_hookimpls()
    impl.function([{"metric": "bw"}])
    assert seen == [[{"metric": "bw"}]]


def test_a_misspelt_hook_is_an_error_at_load_naming_the_hook_it_meant():
    pm, broken = hooks.manager([("site", _module(case_finshed=lambda rows: None))])
    assert broken == ["hook site failed to load: case_finshed is no hook (did you mean "
                      "case_finished?)"], broken
    assert pm.get_plugin("site") is None


def test_a_hook_taking_an_argument_it_is_never_passed_is_an_error_at_load():
    pm, broken = hooks.manager([("site", _module(run_finished=lambda rows, when: None))])
    assert broken == ["hook site failed to load: run_finished takes when, which netbench "
                      "never passes (it passes rows)"], broken
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
    assert len(pm.hook.update_env.get_hookimpls()) == 1


def test_only_declared_hooks_can_be_called():
    import pytest

    with pytest.raises(AttributeError):
        hooks.call("case_finshed", [])
