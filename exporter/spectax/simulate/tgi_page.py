"""The /metrics page of a simulated TGI 3.3 router, from the same state as vLLM's page.

The shape is the fixtures' (tests/fixtures/tgi-3.3.6: metrics-exporter-prometheus, so
``# TYPE`` lines only, no labels but ``le`` and ``method``, counters without ``_total``, no
``process_*`` families, integers without a decimal point). TGI counts tokens only as
histograms, and has no drafted-token count: ``tgi_request_skipped_tokens`` records n - 1
for every generation of n tokens, so each decode step of a request (the state's drafts)
adds its accepted drafts, and each prefill -- a finished request's, or one still running --
adds a 0. Its buckets 0..K come from the state's accepted counts per position: a step
skipped at least j + 1 tokens when position j was accepted.
"""

from __future__ import annotations

from collections.abc import Sequence

from spectax.simulate.pagetext import finished, rebucket
from spectax.simulate.state import EngineState, Histogram

__all__ = ["TgiPage"]

_DURATION_BUCKETS = [0.0001 * 1.5**x for x in range(35)]  # router/src/server.rs
_INPUT_BUCKETS = [20.0, 100.0, 1000.0]
_GENERATED_BUCKETS = [1.0, 10.0, 100.0, 1000.0]
_MAX_NEW_BUCKETS = [1.0 + 100.0 * x for x in range(20)]
_BATCH_BUCKETS = [float(x) for x in range(1, 1025)]
# TGI validates a request (tokenizing it) before queueing: about this long, each.
_VALIDATION_S = 0.0004


def _value(v: float) -> str:
    """A value as metrics-exporter-prometheus writes it: 40, 0.5000000000000002."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


class TgiPage:
    """One TGI router's page; build a new one when the engine restarts."""

    content_type = "text/plain; charset=utf-8"

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def render(self) -> str:
        s = self.state
        c = s.counters
        h = s.hists
        done = finished(s)
        running = round(s.gauge_running)
        waiting = round(s.gauge_waiting)
        out = [
            _scalar("tgi_request_count", "counter", done + running + waiting),
            _scalar("tgi_request_success", "counter", done),
            _scalar("tgi_queue_size", "gauge", waiting),
            _scalar("tgi_batch_current_size", "gauge", running),
            _scalar("tgi_batch_current_max_tokens", "gauge", 0),
            _from_state("tgi_request_input_length", h["prompt"], _INPUT_BUCKETS, tokens=True),
            _from_state(
                "tgi_request_generated_tokens", h["gen_tokens"], _GENERATED_BUCKETS, tokens=True
            ),
            _from_state("tgi_request_mean_time_per_token_duration", h["tpot"], _DURATION_BUCKETS),
            _from_state("tgi_request_duration", h["e2e"], _DURATION_BUCKETS),
        ]
        n = round(h["e2e"].count)
        validation = [0 if le < _VALIDATION_S else n for le in _DURATION_BUCKETS]
        out += [
            _histogram("tgi_request_validation_duration", "", _DURATION_BUCKETS,
                       [*validation, n], n * _VALIDATION_S),
            _from_state("tgi_request_queue_duration", h["queue"], _DURATION_BUCKETS),
            _from_state("tgi_request_inference_duration", h["inference"], _DURATION_BUCKETS),
            _from_state("tgi_request_max_new_tokens", h["max_tokens"], _MAX_NEW_BUCKETS),
            _histogram("tgi_batch_next_size", "", _BATCH_BUCKETS, [done] * 1025, done),
        ]  # fmt: skip
        out.append(self._skipped(done + running))
        # One forward pass per engine step, timed like the steps' inter-token latency.
        itl = h["itl"]
        per_step = c.steps / itl.count if itl.count else 0.0
        out.append(
            _histogram(
                "tgi_batch_forward_duration",
                'method="decode"',
                _DURATION_BUCKETS,
                rebucket(itl, _DURATION_BUCKETS, per_step),
                itl.sum * per_step,
            )
        )
        return "".join(out)

    def _skipped(self, prefills: int) -> str:
        """tgi_request_skipped_tokens: a 0 per prefill, the accepted drafts per decode step."""
        s = self.state
        c = s.counters
        k = s.speculative_tokens
        if k == 0:  # every generation is one token: as many zeros as tokens generated
            gen = c.generation_tokens
            return _histogram("tgi_request_skipped_tokens", "", [0.0], [gen, gen], 0)
        per_pos = s.accepted_per_position()
        total = prefills + c.drafts
        # At most j skipped: the prefills plus the steps that did not accept position j.
        cums = [total - per_pos[j] for j in range(k)]
        bounds = [float(j) for j in range(k + 1)]
        return _histogram(
            "tgi_request_skipped_tokens", "", bounds, [*cums, total, total], c.accepted
        )


def _scalar(name: str, kind: str, value: float) -> str:
    return f"# TYPE {name} {kind}\n{name} {_value(value)}\n\n"


def _from_state(name: str, hist: Histogram, bounds: Sequence[float], tokens: bool = False) -> str:
    """A state histogram at TGI's bounds; token counts sum to whole tokens (the fast path
    adds expected, fractional observations)."""
    cums = rebucket(hist, bounds)
    return _histogram(name, "", bounds, cums, round(hist.sum) if tokens else hist.sum)


def _histogram(
    name: str, extra: str, bounds: Sequence[float], cums: Sequence[float], total: float
) -> str:
    """A histogram in metrics-exporter-prometheus's layout: buckets, sum, count."""
    sep = f"{extra}," if extra else ""
    lab = f"{{{extra}}}" if extra else ""
    les = [*map(repr, map(float, bounds)), "+Inf"]
    return (
        f"# TYPE {name} histogram\n"
        + "".join(
            f'{name}_bucket{{{sep}le="{le}"}} {_value(v)}\n'
            for le, v in zip(les, cums, strict=True)
        )
        + f"{name}_sum{lab} {_value(total)}\n{name}_count{lab} {_value(cums[-1])}\n\n"
    )
