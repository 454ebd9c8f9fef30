"""Stored step-time profiles (ECONOMICS.md §3b): named sets of B*, h, c and the plain curve,
learned on an endpoint that had a control or fitted to a benchmark sweep, and read by every
endpoint whose config names them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from spectax.economics.step_model import PlainCurve, Profile
from spectax.store.database import DATABASE_ERRORS, Database, StoreError, reason
from spectax.store.models import ProfileRow


class ProfileHistory(Database):
    async def save_profile(self, profile: Profile, now: datetime) -> None:
        """Insert or replace the profile of that name, with the method it was learned with:
        h and c are that method's, so another method's endpoint takes only B* and the curve."""
        plain = profile.plain
        values = {
            "name": profile.name,
            "source": profile.source,
            "learned_from": profile.learned_from[:512],
            "ridge_batch_requests": profile.ridge_batch,
            "step_overhead_ratio": profile.step_overhead_ratio,
            "draft_cost_ratio": profile.draft_cost_ratio,
            "plain_fixed_seconds": plain.fixed_seconds if plain else None,
            "plain_per_token_seconds": plain.per_token_seconds if plain else None,
            "plain_residual_low": plain.residuals[0] if plain else None,
            "plain_residual_high": plain.residuals[1] if plain else None,
            "points": profile.points,
            "mean_abs_error_ratio": profile.mean_abs_error_ratio,
            "method": profile.method,
            "updated_at": now,
        }
        statement = self._insert(ProfileRow).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=["name"],
            set_={k: statement.excluded[k] for k in values if k != "name"},
        )
        try:
            async with self._sessions.begin() as session:
                await session.execute(statement)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot write profile {profile.name!r}: {reason(exc)}") from None

    async def profiles(self) -> dict[str, Profile]:
        """Every stored profile, by name."""
        try:
            async with self._sessions() as session:
                rows = (await session.scalars(select(ProfileRow))).all()
        except DATABASE_ERRORS as exc:
            raise StoreError(f"cannot read profiles: {reason(exc)}") from None
        return {row.name: profile_of(row) for row in rows}


def profile_of(row: ProfileRow) -> Profile:
    plain = None
    if row.plain_fixed_seconds is not None and row.plain_per_token_seconds is not None:
        residuals = (row.plain_residual_low or 0.0, row.plain_residual_high or 0.0)
        plain = PlainCurve(
            fixed_seconds=row.plain_fixed_seconds,
            per_token_seconds=row.plain_per_token_seconds,
            points=row.points,
            residuals=residuals,
        )
    return Profile(
        name=row.name,
        source="sweep"
        if row.source == "sweep"
        else "baseline"
        if row.source == "baseline"
        else "control",
        learned_from=row.learned_from,
        ridge_batch=row.ridge_batch_requests,
        step_overhead_ratio=row.step_overhead_ratio,
        draft_cost_ratio=row.draft_cost_ratio,
        plain=plain,
        points=row.points,
        mean_abs_error_ratio=row.mean_abs_error_ratio,
        method=row.method,  # None on a profile stored before 0010: not recorded
    )
