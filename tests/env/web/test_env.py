"""The computer-use environment on a real sandboxed Chromium: actions, rewards, budgets, and the
isolation of the page from everything but its app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from kvharness.env.web.actions import ClickAt, Done, Key, Type
from kvharness.env.web.apps import task as web_task
from kvharness.env.web.apps._page import page
from kvharness.env.web.env import AsyncWebEnv, WebConfig
from kvharness.env.web.play import play
from kvharness.env.web.task import Click, Milestone, WebTask

pytestmark = pytest.mark.slow

_PROBE_JS = """
window.results = {};
window.kvhState = () => ({ results: window.results, text: document.getElementById('t').value,
                           clicks: window.clicks || 0 });
document.getElementById('b').addEventListener('click', () => { window.clicks = (window.clicks || 0) + 1; });
async function probe(name, url) {
  try { const r = await fetch(url); window.results[name] = 'status ' + r.status + ' ' + (await r.text()).slice(0, 40); }
  catch (e) { window.results[name] = 'failed'; }
}
document.getElementById('f').addEventListener('click', async () => {
  await probe('loopback', LOOPBACK);
  await probe('external', 'https://example.com/');
  await probe('file', 'file:///etc/hostname');
  await probe('checker', '/kvh/checker.py');
  await probe('escape', '/../../etc/passwd');
  await probe('own', '/data.txt');
  window.results.done = true;
});
document.getElementById('w').addEventListener('click', () => { window.open('https://example.com/'); });
"""


def _probe_task(loopback: str) -> WebTask:
    body = (
        "<input id='t' value='old text' size='30'> <button id='b'>Press</button> "
        "<button id='f'>Probe</button> <button id='w'>Popup</button><p>"
        "<a id='ext' href='https://example.com/'>external</a> "
        "<a id='file' href='file:///etc/passwd'>file</a> "
        f"<a id='loop' href='{loopback}'>loopback</a> "
        "<a id='chrome' href='chrome://version'>chrome</a></p>"
    )
    script = f"const LOOPBACK = {json.dumps(loopback)};" + _PROBE_JS
    return WebTask(
        family="probe",
        seed=0,
        instruction="Press the button twice.",
        files={"index.html": page("Probe", body, script), "data.txt": "app data"},
        milestones=(
            Milestone("pressed once", lambda s: s.get("clicks", 0) >= 1),
            Milestone("pressed twice", lambda s: s.get("clicks", 0) >= 2),
        ),
        oracle=(Click("#b"), Click("#b")),
    )


@pytest.fixture
async def loopback() -> AsyncIterator[tuple[str, list[str]]]:
    """A real HTTP server on the host's loopback, counting the requests that reach it."""
    hits: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="host secret")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hit", hits
    finally:
        await runner.cleanup()


async def _centre(env: AsyncWebEnv, selector: str) -> tuple[float, float]:
    rect = await env.locate(selector)
    assert rect is not None
    return rect.centre


async def test_rewards_follow_milestones_and_sum_to_the_episode_reward(
    loopback: tuple[str, list[str]],
) -> None:
    task = _probe_task(loopback[0])
    async with AsyncWebEnv(task, WebConfig(width=800, height=500)) as env:
        obs, info = await env.reset()
        assert obs.screenshot.startswith(b"\x89PNG") and task.instruction in obs.text
        assert info["milestones"] == []
        x, y = await _centre(env, "#b")
        first = await env.step(f"I press it: click({x}, {y})")
        assert first.reward == pytest.approx(0.5) and not first.terminated
        assert first.info["milestones"] == ["pressed once"] and first.info["error"] is None
        assert set(first.info["timing"]) == {"action_s", "settle_s", "state_s", "screenshot_s"}
        second = await env.step(ClickAt(x, y))
        # The task's own check holds: solved, and the episode ends (stop_on_solve).
        assert second.terminated and second.reward == pytest.approx(0.5)
        assert first.reward + second.reward == second.info["episode_reward"] == 1.0
        with pytest.raises(RuntimeError, match="episode is over"):
            await env.step(Done())


async def test_bad_actions_are_steps_with_errors_never_crashes(
    loopback: tuple[str, list[str]],
) -> None:
    task = _probe_task(loopback[0])
    async with AsyncWebEnv(task, WebConfig(width=800, height=500, max_steps=5)) as env:
        await env.reset()
        garbled = await env.step("I am not sure what to do")
        assert "no action found" in garbled.info["error"] and garbled.reward == 0.0
        off = await env.step(ClickAt(900, 10))
        assert "off the screen" in off.observation.text
        key = await env.step(Key("Hyper+q"))
        assert "unknown modifier" in key.info["error"]
        assert off.observation.screenshot.startswith(b"\x89PNG")
        await env.step(Done())
        # done() ends the episode unsolved: the budget is not what stopped it.
        assert env.episode_reward == 0.0


async def test_the_accessibility_tree_joins_the_text_when_asked(
    loopback: tuple[str, list[str]],
) -> None:
    task = _probe_task(loopback[0])
    async with AsyncWebEnv(task, WebConfig(accessibility=True)) as env:
        obs, _ = await env.reset()
        assert 'button "Press"' in obs.text and 'link "external"' in obs.text
        assert 'textbox "" = "old text"' in obs.text
    async with AsyncWebEnv(task) as env:
        obs, _ = await env.reset()
        assert "Accessibility tree" not in obs.text


async def test_closing_kills_the_browser(loopback: tuple[str, list[str]]) -> None:
    env = AsyncWebEnv(_probe_task(loopback[0]))
    await env.reset()
    browser = env._browser
    assert browser is not None and browser.alive
    await env.close()
    assert not browser.alive and browser._proc is not None and browser._proc.returncode is not None


async def test_the_step_budget_truncates(loopback: tuple[str, list[str]]) -> None:
    async with AsyncWebEnv(_probe_task(loopback[0]), WebConfig(max_steps=2)) as env:
        await env.reset()
        assert not (await env.step(Key("Tab"))).truncated
        last = await env.step(Key("Tab"))
        assert last.truncated and not last.terminated


async def test_select_all_then_type_replaces_a_field(loopback: tuple[str, list[str]]) -> None:
    async with AsyncWebEnv(_probe_task(loopback[0])) as env:
        await env.reset()
        await env.step(ClickAt(*await _centre(env, "#t")))
        await env.step(Key("Control+a"))
        await env.step(Type("new"))
        state = await env._state()
        assert state["text"] == "new"


async def test_the_page_reaches_nothing_but_its_app(loopback: tuple[str, list[str]]) -> None:
    url, hits = loopback
    async with AsyncWebEnv(_probe_task(url)) as env:
        await env.reset()
        await env.step(ClickAt(*await _centre(env, "#f")))
        state: dict[str, object] = {}
        for _ in range(50):
            state = await env._state()
            if state["results"].get("done"):  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.1)
        results = state["results"]
        assert results == {
            "loopback": "failed",
            "external": "failed",
            "file": "failed",
            "checker": "status 404 not found",
            "escape": "status 404 not found",
            "own": "status 200 app data",
            "done": True,
        }
        await env.step(ClickAt(*await _centre(env, "#w")))
        assert "https://example.com/" not in await env.url()
    assert hits == []


@pytest.mark.parametrize("link", ["#ext", "#file", "#loop", "#chrome"])
async def test_links_elsewhere_lead_nowhere(loopback: tuple[str, list[str]], link: str) -> None:
    url, hits = loopback
    async with AsyncWebEnv(_probe_task(url)) as env:
        await env.reset()
        step = await env.step(ClickAt(*await _centre(env, link)))
        assert step.info["error"] is None
        where = await env.url()
        assert where.startswith(("http://app.test/", "chrome-error://")), where
        # The app's hidden state is gone with the page; nothing of the target was shown.
        assert "host secret" not in json.dumps(await env._state())
    assert hits == []


async def test_without_the_sandbox_interception_still_blocks(
    loopback: tuple[str, list[str]],
) -> None:
    """The second layer alone (unsafe mode: no bubblewrap, no URL policy): every request the
    page makes is answered from the task's files or failed, so the host's loopback server is not
    reached even though the browser shares the host's network."""
    url, hits = loopback
    async with AsyncWebEnv(_probe_task(url), WebConfig(unsafe=True)) as env:
        await env.reset()
        await env.step(ClickAt(*await _centre(env, "#f")))
        for _ in range(50):
            state = await env._state()
            if state["results"].get("done"):
                break
            await asyncio.sleep(0.1)
        assert state["results"]["loopback"] == "failed"
        assert state["results"]["own"] == "status 200 app data"
        await env.step(ClickAt(*await _centre(env, "#loop")))
        assert url in env._browser.blocked if env._browser else True
    assert hits == []


async def test_the_oracle_and_a_halfway_agent() -> None:
    task = web_task("signup-form/3")
    oracle = await play(task, "oracle")
    assert oracle.reward == 1.0 and oracle.terminated
    assert oracle.milestones[-1] == task.milestones[-1].name
    half = await play(task, "halfway")
    assert 0.0 < half.reward < 1.0
    assert half.milestones == [m.name for m in task.milestones[: len(half.milestones)]]
    assert (await play(task, "noop")).reward == 0.0
