"""A stored profile keeps the speculative method it was learned with (issue 29): h and c are
the method's, so the daemon lends an endpoint of another method only B* and the plain curve.
Profiles stored before the column (0010) read back as method None, "not recorded"."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from spectax.economics import PlainCurve, Profile
from spectax.store import Store
from spectax.store.schema import upgrade

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


async def test_a_profile_comes_back_with_the_method_it_was_saved_with(database_url) -> None:
    store = await Store.open(database_url)
    try:
        curve = PlainCurve(0.004, 0.0002, 6, (-0.02, 0.03))
        for name, method in (("eagle-h100", "eagle3"), ("unknown-method", None)):
            fit = Profile(name, "sweep", "model fit x.csv", 20.0, 0.4, 0.05, curve, method=method)
            await store.save_profile(fit, NOW)
        profiles = await store.profiles()
        assert profiles["eagle-h100"].method == "eagle3"
        assert profiles["unknown-method"].method is None
        # saved again under the same name: the method is replaced with the rest
        again = Profile("eagle-h100", "sweep", "again", 24.0, 0.5, 0.05, curve, method="mtp")
        await store.save_profile(again, NOW)
        assert (await store.profiles())["eagle-h100"].method == "mtp"
    finally:
        await store.close()


async def test_a_profile_stored_before_the_method_column_reads_back_without_one(
    database_url,
) -> None:
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(upgrade, "0009")
        await conn.execute(
            text(
                "INSERT INTO model_profiles (name, source, learned_from, ridge_batch_requests, "
                "step_overhead_ratio, draft_cost_ratio, points, updated_at) VALUES "
                "('old', 'sweep', 'spectax model fit old.csv', 32, 0.3, 0, 5, "
                "'2026-11-01 10:00:00+00:00')"
            )
        )
        await conn.run_sync(upgrade)
    await engine.dispose()
    store = await Store.open(database_url)
    try:
        old = (await store.profiles())["old"]
        assert old.method is None
        assert (old.ridge_batch, old.step_overhead_ratio, old.points) == (32.0, 0.3, 5)
    finally:
        await store.close()
