"""Every bundled task family through the real browser: the oracle solves its variants, noop earns
nothing, an agent that stops half way earns the milestones it reached, random clicking next to
nothing."""

from __future__ import annotations

import asyncio

import pytest

from kvharness.env.web.apps import FAMILIES, suite
from kvharness.env.web.env import WebConfig
from kvharness.env.web.play import WebEpisode, play
from kvharness.env.web.task import WebTask

pytestmark = pytest.mark.slow


def test_the_suite_is_large_and_its_variants_differ() -> None:
    assert len(FAMILIES) >= 20
    for fam in FAMILIES.values():
        a, b = fam.build(0), fam.build(1)
        assert a.id == f"{fam.name}/0" and len(a.milestones) >= 4
        # Seeded variants: the instruction or the app differ, so a variant can't be memorised.
        assert a.instruction != b.instruction or a.files != b.files
        # No milestone holds on an empty state, and checks never raise on odd states.
        for m in a.milestones:
            for odd in ({}, {"x": None}, {k: None for k in "abcdefghijklmnopqrstuvwxyz"}):
                assert m.check(odd) is False


@pytest.mark.parametrize("name", sorted(FAMILIES))
async def test_oracle_noop_and_halfway(name: str) -> None:
    fam = FAMILIES[name]
    first, task = fam.build(0), fam.build(7)
    # Four browsers at once: their steps wait on the pages as much as on the CPU.
    *oracles, noop, half = await asyncio.gather(
        play(first, "oracle", WebConfig(max_steps=200)),
        play(task, "oracle", WebConfig(max_steps=200)),
        play(task, "noop"),
        play(task, "halfway", WebConfig(max_steps=200)),
    )
    for t, oracle in zip((first, task), oracles, strict=True):
        errors = [s.error for s in oracle.steps if s.error]
        assert oracle.reward == 1.0, (t.id, oracle.milestones, errors)
        assert oracle.milestones == [m.name for m in t.milestones]
    assert noop.reward == 0.0 and noop.milestones == []
    assert 0.0 < half.reward < 1.0, (task.id, half.milestones)
    # Credit is for milestones reached in order: a prefix of the task's.
    assert half.milestones == [m.name for m in task.milestones[: len(half.milestones)]]


async def test_random_clicking_earns_next_to_nothing() -> None:
    gate = asyncio.Semaphore(3)  # browsers at once: the steps wait on the page as much as the CPU

    async def one(task: WebTask) -> WebEpisode:
        async with gate:
            return await play(task, "random", WebConfig(max_steps=25))

    episodes = await asyncio.gather(*(one(t) for t in suite((0,))))
    mean = sum(ep.reward for ep in episodes) / len(episodes)
    assert mean < 0.1, [(ep.task, ep.reward) for ep in episodes if ep.reward]
    assert all(len(ep.steps) == 25 and ep.truncated for ep in episodes)
