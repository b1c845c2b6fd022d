"""Speed-ups that read a dependency's private parts: opt-in (``CITEFLOW_STEP_CACHE=true``),
each with the figure that justifies it. Nothing else in citeflow reads a private attribute of a
dependency (`tests/test_public_apis.py` holds that, with this module its one exception).

`with_step_cache`: llama-index-workflows asks a workflow for its steps on every step of every
run, and `Workflow._get_steps` rebuilds them with `inspect.getmembers` each time: 0.083 ms of CPU
a call, about 9 calls an answer, so 0.76 ms of CPU per answer (`bench/engine_overhead.py` runs
with and without it). The steps change only when a step is added to the class, which the
runtime's private ``_step_functions_version`` counts; the cache keys on it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from workflows import Workflow

W = TypeVar("W", bound=type[Workflow])


class StepCache(Workflow):
    """Mixin: a workflow that builds its steps once per version of its class."""

    def _get_steps(self) -> dict[str, Any]:
        version = type(self)._step_functions_version
        cached = self.__dict__.get("_citeflow_steps")
        if cached is None or cached[0] != version:
            cached = (version, super()._get_steps())
            self.__dict__["_citeflow_steps"] = cached
        steps: dict[str, Any] = cached[1]
        return steps


def with_step_cache(workflow_class: W) -> W:
    """A subclass of ``workflow_class`` whose instances build their steps once."""
    subclass: W = type(workflow_class.__name__, (StepCache, workflow_class), {})  # type: ignore[assignment]
    subclass.__module__ = workflow_class.__module__
    return subclass
