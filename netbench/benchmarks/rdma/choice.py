"""Which data plane a case runs on: the compiled one where it is built, else pyverbs saying
why. Apart from plane.py, which both planes import for the types they share, so nothing
imports in a circle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbench.api import SkipCase

from .plane import PYVERBS_PLANE_NOTE, DataPlane


def choose(params: Mapping[str, Any]) -> tuple[DataPlane, str]:
    """The case's data plane, and a fallback line when it is the slow one."""
    from .pyverbs_plane import PLANE as PYVERBS

    if params.get("data_plane", "auto") == "pyverbs":
        return PYVERBS, ""
    try:
        from .compiled_plane import PLANE as COMPILED
    except ImportError as exc:
        if params.get("data_plane") == "compiled":
            raise SkipCase(f"data_plane=compiled: the C data plane is not built ({exc}); "
                           "install libibverbs-dev and a C compiler, then reinstall netbench "
                           "(pip install -e .)") from None
        return PYVERBS, PYVERBS_PLANE_NOTE.format(why=exc)
    return COMPILED, ""
