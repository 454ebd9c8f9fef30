"""The values an endpoint monitor hands out and is resumed from, in a room below both the
monitor (spectax.endpoint) and the store, so that neither needs the other: as Home
Assistant's coordinator, the monitor keeps the last good data and never knows who
persists it.

`Observed` is what an observation leaves for the history: the daemon hands it to the
store writer, which encodes its rows (spectax.store.rows.pending_write). `Resume` is what
the store hands back at start-up (Store.restore): where the last run stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from spectax.economics.assessment import AssessedWindow
from spectax.engines.base import EngineSample
from spectax.pipeline.windows import Window


@dataclass(frozen=True, slots=True)
class Observed:
    """One endpoint's windows for the history, assessed under the parameters in force when
    they were handed out: those an observation closed, and (from `flush`) the open one so
    far; with the cursor that goes with them, the last page's time and sample, where a
    restart resumes. A scrape that closes nothing hands out none (None), so the common
    scrape costs nothing here."""

    endpoint: str
    closed: Sequence[AssessedWindow]
    cursor: tuple[float, EngineSample] | None
    open_window: AssessedWindow | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """Where a monitor carries on: the money it had accrued, the last page's time and sample
    (its cursor), the window that was open, and for the plain curve's fit the latest closed
    windows that did not speculate (as the store reads them back, with only what
    `plain_point` reads: spectax.store's `restore`). The default is a first start."""

    spend_usd_total: Decimal = Decimal(0)
    cold_start_usd_total: Decimal = Decimal(0)
    cursor: tuple[float, EngineSample] | None = None
    open_window: Window | None = None
    recent_windows: tuple[Window, ...] = ()
