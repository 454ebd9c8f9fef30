"""Which counterfactual is in force for one endpoint, and why (ECONOMICS.md §3b).

A speculating endpoint cannot see what its output would have cost without speculation.
`Counterfactual.step_model` is the one rule that says under which B*, h and plain curve
its windows are assessed: from the first of these sources that has one.

1. ``control``: the plain curve of its control, an endpoint serving the same model
   without speculation (config ``control:``), looked up in the monitors of the moment
   (`control_lookups`);
2. ``baseline``: its own plain curve from its windows before speculation was on
   (`PlainCalibration`, fed the closed windows), or after a restart the one the store
   kept (`baseline/NAME`, spectax.counterfactual.profile_book);
3. ``profile``: the profile its config names (``profile: NAME``), learned on an endpoint
   of the same model and hardware that had a control; ``sweep`` when it was fitted to a
   benchmark sweep (``spectax model fit --save-profile``). A profile of another
   speculative method lends only its B* and plain curve, not its h;
4. ``roofline``: B* from vLLM's FLOP and byte estimates over the window and its GPU's
   datasheet peaks (`RooflinePrior`), a prior and not a measurement;
5. ``configured``: the endpoint's configured B* and h.

h is never below the method's floor (`economics.step_overhead_floor`). Where the endpoint
has a control, the step overheads its closed windows implied against the control's curve
are kept (`learn`): their median is the h of the profile it teaches. What the chosen
source makes of a window (the speedup, its band, the verdict's basis) is
spectax.economics.step_model's.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from spectax import economics
from spectax.economics import (
    Assessment,
    PlainCalibration,
    PlainCurve,
    Profile,
    Source,
    StepModel,
)
from spectax.endpoint_config import EndpointConfig
from spectax.gpus import GpuSpec
from spectax.pipeline.windows import Window

# The endpoint monitor's logger: log filters and alerting on JSON logs select by it.
log = logging.getLogger("spectax.monitor")

CALIBRATION_POINTS = 288  # a day of 5-minute windows

ControlLookup = Callable[[], Window | None]
CurveLookup = Callable[[], PlainCurve | None]
ProfileLookup = Callable[[], Profile | None]

#: (endpoint, profile) pairs already logged as a profile lent to another method.
_TOLD_OTHER_METHOD: set[tuple[str, str]] = set()


class Counterfactual:
    """One endpoint's sources of the counterfactual, and the rule that picks among them."""

    def __init__(
        self,
        config: EndpointConfig,
        *,
        control_window: ControlLookup | None = None,
        control_curve: CurveLookup | None = None,
        profile: ProfileLookup | None = None,
        baseline: ProfileLookup | None = None,
        gpu: GpuSpec | None = None,
        gpu_name: str | None = None,
    ):
        """`gpu`: its GPU's specs, for the roofline; `gpu_name`: the GPU its configuration
        names (spectax.tariffs.gpu_named), to say which one is not in the table."""
        self.config = config
        self._control_window = control_window
        self._control_curve = control_curve
        self._profile = profile
        self._baseline = baseline  # the baseline the store kept, after a restart
        self.calibration = PlainCalibration(
            config.name, CALIBRATION_POINTS, config.calibration_min_windows
        )
        self.roofline = RooflinePrior(config.name, gpu, gpu_name)
        # The step overheads its windows implied against the control's curve: their median is
        # the h of the profile this endpoint teaches (config `profile:` with a `control:`). An
        # array: an empty deque is 760 bytes, ~1.5 MB at 2,000 endpoints that mostly never learn.
        self.implied_overheads = array("d")

    def step_model(self, window: Window | None) -> StepModel:
        """The counterfactual in force, from the first source that has one (this module's
        list); `window` is what the roofline is read from."""
        config, spec = self.config, self.config.speculation
        h = config.step_overhead_ratio
        floor = economics.step_overhead_floor(spec.method if spec else None)
        if (measured := self._measured_curve()) is not None:
            curve, source = measured
            return StepModel(
                ridge_batch=curve.ridge_batch or config.ridge_batch,
                step_overhead_ratio=h,
                source=source,
                curve=curve,
                step_overhead_floor=floor,
            )
        profile = self._profile() if self._profile is not None else None
        if profile is not None:
            return self._from_profile(profile, floor)
        if (roofline := self.roofline.ridge_batch(window)) is not None:
            return StepModel(
                ridge_batch=roofline,
                step_overhead_ratio=h,
                source="roofline",
                step_overhead_floor=floor,
            )
        return StepModel(
            ridge_batch=config.ridge_batch,
            step_overhead_ratio=h,
            source="configured",
            step_overhead_floor=floor,
        )

    def _measured_curve(self) -> tuple[PlainCurve, Source] | None:
        """A plain curve measured: the control's, else (once it speculates) its own from
        before speculation, fitted here or kept in the store."""
        control = self.control_curve()
        if control is not None:
            return control, "control"
        if self.config.speculation is None:
            return None
        own = self.calibration.fit
        if own is None and self._baseline is not None:  # the fit kept in the store
            stored = self._baseline()
            own = stored.plain if stored is not None else None
        return (own, "baseline") if own is not None else None

    def _from_profile(self, profile: Profile, floor: float) -> StepModel:
        """A profile's B*, curve and (of the same method only) h; another method's is said
        once, not every window."""
        config, spec = self.config, self.config.speculation
        same_method = profile.method is None or spec is None or profile.method == spec.method
        told = (config.name, profile.name)
        if not same_method and told not in _TOLD_OTHER_METHOD:
            _TOLD_OTHER_METHOD.add(told)
            log.warning(
                "endpoint %s: profile %r was learned with %s, this endpoint runs %s: its "
                "B* and plain curve are used, its step overhead and draft cost are not",
                config.name,
                profile.name,
                profile.method,
                spec.method if spec else None,
            )
        return StepModel(
            ridge_batch=profile.ridge_batch,
            step_overhead_ratio=profile.step_overhead_ratio
            if same_method
            else config.step_overhead_ratio,
            source="sweep" if profile.source == "sweep" else "profile",
            curve=profile.plain,
            profile=profile.name,
            relative_error=profile.mean_abs_error_ratio if profile.plain is None else None,
            step_overhead_floor=floor,
            overhead_known=same_method,
        )

    def control_curve(self) -> PlainCurve | None:
        """The control's plain curve, when this endpoint has a control and it is fitted."""
        return self._control_curve() if self._control_curve is not None else None

    def control_window(self) -> Window | None:
        """The control's sliding window, to measure the speedup against."""
        return self._control_window() if self._control_window is not None else None

    def calibrate(self, windows: Iterable[Window]) -> None:
        """Feed closed windows (at start-up: the store's recent ones) to the plain curve's
        fit: windows without speculation, this endpoint's baseline once it speculates
        (and its control's, for the endpoints it is the control of)."""
        had = self.calibration.fit is not None, self.calibration.refusal
        if not self.calibration.add(windows):
            return
        fit, refusal = self.calibration.fit, self.calibration.refusal
        if fit is not None and not had[0]:
            log.info(
                "endpoint %s: plain curve fitted (B* = %.1f, %d windows)",
                self.config.name,
                fit.ridge_batch or float("inf"),
                fit.points,
            )
        elif refusal is not None and (had[0] or had[1] is None):  # said once, not each window
            log.info("endpoint %s: plain curve not sound: %s", self.config.name, refusal)

    def learn(self, assessments: Iterable[Assessment]) -> None:
        """Keep the step overhead each closed window implied against the control's curve
        (the last day of them)."""
        for assessment in assessments:
            h = assessment.step_overhead_ratio
            learned = (
                assessment.model_source == "control" and assessment.verdict_basis == "calibrated"
            )
            if h is not None and learned:
                self.implied_overheads.append(h)
                del self.implied_overheads[:-CALIBRATION_POINTS]


class Monitored(Protocol):
    """What a control lookup reads of an endpoint's monitor (spectax.endpoint)."""

    counterfactual: Counterfactual

    def window(self) -> Window | None: ...


def control_lookups(
    monitors: Callable[[], Mapping[str, Monitored]], control: str | None
) -> dict[str, Any]:
    """The control endpoint's sliding window and plain curve, looked up when needed, in the
    monitors of the moment (a takeover or a reload replaces the whole dict): the keyword
    arguments `Counterfactual` (and the monitor) take."""
    if control is None:
        return {}

    def curve() -> PlainCurve | None:
        monitor = monitors().get(control)
        return monitor.counterfactual.calibration.fit if monitor is not None else None

    def window() -> Window | None:
        monitor = monitors().get(control)
        return monitor.window() if monitor is not None else None

    return {"control_window": window, "control_curve": curve}


class RooflinePrior:
    """One endpoint's roofline prior for B*: from each window's FLOP and byte estimates
    (vLLM --enable-mfu-metrics) and its GPU's peaks (spectax.gpus). A window without
    estimates (idle) keeps the last figure; estimates for a GPU not in the table are said
    once."""

    def __init__(self, endpoint: str, gpu: GpuSpec | None, named: str | None):
        self._endpoint = endpoint
        self._gpu = gpu
        self._named = named  # the GPU the configuration names, for the message
        self._ridge_batch: float | None = None
        self._said_no_gpu = False

    def ridge_batch(self, window: Window | None) -> float | None:
        estimates = economics.roofline_estimates(window) if window is not None else None
        if estimates is not None and (gpu := self._gpu) is not None:
            peaks = (gpu.peak_flops_per_second, gpu.memory_bytes_per_second)
            self._ridge_batch = economics.roofline_ridge_batch(*estimates, *peaks)
        elif estimates is not None and not self._said_no_gpu:
            self._said_no_gpu = True
            named = self._named
            log.info(
                "endpoint %s: vLLM estimates FLOPs and bytes, but %s: B* stays the configured one",
                self._endpoint,
                f"GPU {named!r} is not in spectax's GPU table" if named else "it names no `gpu:`",
            )
        return self._ridge_batch
