"""The measured speedup: an endpoint against its control over the same span.

With a control (the same model served without speculation) nothing is modelled:
the speedup is the ratio of the two time-per-output-token means, and it decides
the verdict (ECONOMICS.md §3: "measured speedup = control time-per-output-token /
this endpoint's").
"""

from __future__ import annotations

from spectax.pipeline.windows import Window

#: Finished requests each side needs for a measured speedup: a ratio of two or three
#: requests' timings says more about those requests than about speculation.
MIN_MEASURED_REQUESTS = 10


def measured_speedup(
    window: Window, control: Window | None, model: str, min_requests: int = MIN_MEASURED_REQUESTS
) -> float | None:
    """Measured speedup: the control's time per output token / this endpoint's, same span.

    The control serves the same model without speculation. Its model is
    matched by name, or taken as it is when both serve exactly one model.
    Each side needs `min_requests` finished requests.
    """
    if control is None:
        return None
    counterpart = model
    if model not in control.models and len(control.models) == 1 and len(window.models) == 1:
        counterpart = next(iter(control.models))
    ours, theirs = window.models.get(model), control.models.get(counterpart)
    for side in (ours, theirs):
        timing = side.time_per_output_token if side is not None else None
        if timing is None or timing.count < min_requests or timing.sum <= 0:
            return None
    ours_tpot = window.time_per_output_token(model)
    theirs_tpot = control.time_per_output_token(counterpart)
    assert ours_tpot is not None and theirs_tpot is not None
    return theirs_tpot / ours_tpot
