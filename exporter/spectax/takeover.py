"""Taking over the store's writing in an HA pair (spectax.store.leader), as /metrics sees it.

On taking over, the daemon rebuilds its monitors from the store, as a restart does: the
windows go on from the last leader's cursor, so none is lost or written twice. The money
counters restored with them are the store's totals, which may be a little below what this
process showed while it followed (its own scrapes ran a second or two ahead); a counter
that steps back reads as a reset to rate() and increase(), a false jump of the whole total.
So they carry on from whichever is higher. The token counters are this process's own and
start again from zero, as at a restart, which rate() reads correctly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from spectax.endpoint import EndpointMonitor


def keep_money_counters_rising(
    before: Mapping[str, EndpointMonitor], after: Mapping[str, EndpointMonitor]
) -> None:
    """Raise each monitor of `after` to the spend its predecessor in `before` showed."""
    for name, monitor in after.items():
        if (earlier := before.get(name)) is not None:
            old, new = earlier.snapshot, monitor.snapshot
            monitor.snapshot = replace(
                new,
                spend_usd_total=max(old.spend_usd_total, new.spend_usd_total),
                cold_start_usd_total=max(old.cold_start_usd_total, new.cold_start_usd_total),
            )
