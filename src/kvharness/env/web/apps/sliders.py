"""Set three custom (drag or arrow-key) sliders in a settings panel to exact values, then apply."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, OracleStep, Press, State, WebTask

_CONTROLS = (
    ("Master volume", 0, 100), ("Bass", -12, 12), ("Treble", -12, 12), ("Balance", -50, 50),
    ("Microphone gain", 0, 100), ("Brightness", 0, 100), ("Contrast", 0, 100),
    ("Colour temperature", -20, 20), ("Sharpness", 0, 40), ("Notification volume", 0, 100),
)  # fmt: skip
_PANELS = ("Audio & display", "Sound and screen", "Output settings", "Media preferences")

_SCRIPT = """
const val = Object.fromEntries(D.controls.map((c) => [c.id, c.init]));
let applied = Object.assign({}, val), drag = null;
const ctl = (id) => D.controls.find((c) => c.id === id);
function set(id, v) {
  const c = ctl(id);
  val[id] = Math.max(c.min, Math.min(c.max, Math.round(v)));
  const f = (val[id] - c.min) / (c.max - c.min);
  document.getElementById('h-' + id).style.left = (f * D.width) + 'px';
  document.getElementById('fill-' + id).style.width = (f * D.width) + 'px';
  document.getElementById('v-' + id).textContent = val[id]; }
const perPx = (c) => (c.max - c.min) / D.width;
document.addEventListener('mousedown', (e) => {
  const h = e.target.closest('.handle'), t = e.target.closest('.track');
  if (h) { drag = {id: h.dataset.id, x: e.clientX, v: val[h.dataset.id]}; h.focus();
    e.preventDefault(); }
  else if (t) {
    const c = ctl(t.dataset.id), r = t.getBoundingClientRect();
    set(c.id, c.min + (e.clientX - r.left) * perPx(c));
    drag = {id: c.id, x: e.clientX, v: val[c.id]};
    document.getElementById('h-' + c.id).focus(); e.preventDefault(); } });
document.addEventListener('mousemove', (e) => {
  if (drag) set(drag.id, drag.v + (e.clientX - drag.x) * perPx(ctl(drag.id))); });
document.addEventListener('mouseup', () => { drag = null; });
document.addEventListener('keydown', (e) => {
  const h = e.target.closest && e.target.closest('.handle'); if (!h) return;
  const id = h.dataset.id, c = ctl(id);
  const step = {ArrowLeft: -1, ArrowDown: -1, ArrowRight: 1, ArrowUp: 1, PageDown: -10,
                PageUp: 10}[e.key];
  if (step) set(id, val[id] + step);
  else if (e.key === 'Home') set(id, c.min);
  else if (e.key === 'End') set(id, c.max);
  else return;
  e.preventDefault(); });
document.getElementById('apply').addEventListener('click', () => {
  applied = Object.assign({}, val); document.getElementById('msg').textContent = 'Applied.'; });
document.getElementById('reset').addEventListener('click', () => {
  Object.keys(applied).forEach((id) => set(id, applied[id]));
  document.getElementById('msg').textContent = ''; });
D.controls.forEach((c) => set(c.id, c.init));
window.kvhState = () => ({values: Object.assign({}, val), applied: Object.assign({}, applied)});
"""


def _style(width: int) -> str:
    return f"""
.row {{ display: flex; align-items: center; height: 64px; }} .row .name {{ width: 220px; }}
.track {{ position: relative; width: {width}px; height: 8px; background: #cfd6e0;
  border-radius: 4px; margin: 0 22px; cursor: pointer; }}
.fill {{ position: absolute; left: 0; top: 0; height: 8px; background: #2f6fdb;
  border-radius: 4px; }}
.handle {{ position: absolute; top: -8px; width: 24px; height: 24px; margin-left: -12px;
  border-radius: 50%; background: #fff; border: 2px solid #2659b0; cursor: grab; }}
.handle:focus {{ outline: 3px solid #f2b84b; }}
.val {{ width: 60px; font-weight: bold; font-size: 17px; }}
.lim {{ color: #66708a; font-size: 13px; width: 36px; text-align: center; }}
"""


def _keys(c: dict[str, Any]) -> list[OracleStep]:
    """The fewest key presses (10s by PageUp/PageDown, 1s by arrows) that take control ``c``
    from its initial value to its target; the slider stops at its ends."""
    delta = c["target"] - c["init"]
    big, small = ("PageUp", "ArrowRight") if delta > 0 else ("PageDown", "ArrowLeft")
    back = "ArrowLeft" if delta > 0 else "ArrowRight"
    tens, ones = divmod(abs(delta), 10)
    keys = [big] * tens + [small] * ones
    if ones > 5 and c["min"] <= c["init"] + (tens + 1) * 10 * (1 if delta > 0 else -1) <= c["max"]:
        keys = [big] * (tens + 1) + [back] * (10 - ones)
    return [Press(k) for k in keys]


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    width = rng.choice((320, 400, 480))
    controls: list[dict[str, Any]] = []
    for i, (name, lo, hi) in enumerate(rng.sample(_CONTROLS, rng.randint(3, 4))):
        controls.append({"id": f"c{i}", "name": name, "min": lo, "max": hi,
                         "init": rng.randint(lo, hi)})  # fmt: skip
    goal: dict[str, int] = {}
    for c in rng.sample(controls, 3):
        span = c["max"] - c["min"]
        choices = [v for v in range(c["min"], c["max"] + 1) if 3 <= abs(v - c["init"]) <= span // 2]
        goal[c["id"]] = rng.choice(choices)
    targets = sorted(
        (dict(c, target=goal[c["id"]]) for c in controls if c["id"] in goal),
        key=lambda c: len(_keys(c)),
    )
    expected = {c["id"]: goal.get(c["id"], c["init"]) for c in controls}

    def values(s: State) -> dict[str, Any]:
        v = s.get("values")
        return v if isinstance(v, dict) else {}

    def setter(upto: int) -> Callable[[State], bool]:
        return lambda s: all(values(s).get(c["id"]) == c["target"] for c in targets[:upto])

    milestones = (
        *(Milestone(f"{c['name']} set", setter(i + 1)) for i, c in enumerate(targets)),
        Milestone(
            "settings applied", lambda s: s.get("applied") == expected and values(s) == expected
        ),
    )
    oracle: list[OracleStep] = []
    for c in targets:
        oracle += [Click(f"#h-{c['id']}"), *_keys(c)]
    oracle.append(Click("#apply"))
    rows = "".join(
        f"<div class='row'><span class='name'>{c['name']}</span>"
        f"<span class='lim'>{c['min']}</span>"
        f"<div class='track' data-id='{c['id']}'><div class='fill' id='fill-{c['id']}'></div>"
        f"<div class='handle' tabindex='0' id='h-{c['id']}' data-id='{c['id']}'></div></div>"
        f"<span class='lim'>{c['max']}</span><span class='val' id='v-{c['id']}'></span></div>"
        for c in controls
    )
    panel = rng.choice(_PANELS)
    body = (
        f"<div class='card'><h3>{panel}</h3>{rows}"
        "<p><button class='primary' id='apply'>Apply</button><button id='reset'>Revert</button>"
        " <span class='ok' id='msg'></span></p></div>"
    )
    wanted = ", ".join(f"\u201c{c['name']}\u201d to {c['target']}" for c in targets)
    instruction = (
        f"In the {panel} panel, set {wanted}, leaving the other settings as they are, "
        "then click Apply. Each slider's value is shown to its right."
    )
    script = f"const D = {js({'controls': controls, 'width': width})};{_SCRIPT}"
    return WebTask(
        family="sliders",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Settings", body, script, style=_style(width))},
        milestones=milestones,
        oracle=tuple(oracle),
    )


FAMILY = Family("sliders", "set custom drag/arrow-key sliders to exact values and apply", build)
