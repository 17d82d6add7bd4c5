"""One call on all of a PCollection, in the fewest steps Beam takes for it.

`CombineGlobally(ToList())` then a Map is six steps and a stage of its own: three of
them make the default value for an empty input. A side input of a one-element Create is
three steps, and an empty input is an empty list. Each step of a job graph costs every
run a fixed time to build and to run (tens of milliseconds), the same at ten rows as at
millions, so a small job is mostly such steps. What is gathered must be small: it is
one list in one task (one row per sorted file or per file part, never per video).
"""
from __future__ import annotations

from typing import Any, Callable

import apache_beam as beam


class ApplyToAll(beam.PTransform):
    """PCollection -> one element: `fn(list of all its elements, *side_inputs)`."""

    def __init__(self, fn: Callable[..., Any], *side_inputs: beam.pvalue.AsSideInput):
        super().__init__()
        self._fn, self._side_inputs = fn, side_inputs

    def expand(self, pcoll):
        fn = self._fn
        return (pcoll.pipeline | "Once" >> beam.Create([None])
                | "Apply" >> beam.Map(lambda _, everything, *side: fn(everything, *side),
                                      beam.pvalue.AsList(pcoll), *self._side_inputs))
