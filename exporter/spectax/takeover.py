"""Taking over the store's writing in an HA pair (spectax.store.leader), as /metrics sees it.

On taking over, the daemon rebuilds its monitors from the store, as a restart does: the
windows go on from the last leader's cursor, so none is lost or written twice. The money
counters restored with them are the store's totals, which may be a little below what this
process showed while it followed (its own scrapes ran a second or two ahead); a counter
that steps back reads as a reset to rate() and increase(), a false jump of the whole total.
So they carry on from whichever is higher. The token counters are this process's own and
start again from zero, as at a restart, which rate() reads correctly. (A reload that
rebuilds a changed endpoint's monitor gets the same guard.)
"""

from __future__ import annotations

from dataclasses import replace

from spectax.endpoint import EndpointMonitor
from spectax.observed import Resume


def not_below(resume: Resume, earlier: EndpointMonitor | None) -> Resume:
    """`resume`, its money totals raised to what `earlier` (the monitor it replaces, if
    any) showed."""
    if earlier is None:
        return resume
    shown = earlier.snapshot
    return replace(
        resume,
        spend_usd_total=max(resume.spend_usd_total, shown.spend_usd_total),
        cold_start_usd_total=max(resume.cold_start_usd_total, shown.cold_start_usd_total),
    )
