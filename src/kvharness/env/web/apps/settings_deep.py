"""Change two settings three dialogs deep (Settings, a section, its advanced options), saving."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_SECTIONS = ("Privacy", "Notifications", "Display", "Security", "Accounts", "Storage", "Network")
_TOGGLES = (
    "Send usage statistics", "Block third-party cookies", "Show previews", "Auto-lock screen",
    "Sync in background", "Compact mode", "Hardware acceleration", "Load remote content",
    "Remember devices", "Verbose logging", "Beta features", "Offline cache", "Two-step sign-in",
    "Read receipts", "Low-data mode", "Auto-update", "Crash reports", "Location access",
)  # fmt: skip
_VALUES = (
    ("Session timeout (minutes)", 5, 120), ("Cache size (MB)", 64, 2048), ("Retry limit", 1, 10),
    ("History length (days)", 7, 365), ("Max connections", 2, 64),
    ("Idle delay (seconds)", 10, 600), ("Font scale (%)", 80, 200),
    ("Backup interval (hours)", 1, 48),
)  # fmt: skip
_ADVANCED = ("Advanced", "More options", "Expert settings")

_SCRIPT = """
let saved = Object.assign({}, D.init), layers = [];
const cat = (key) => D.cats.find((c) => c.key === key);
function open(id, key) {
  const base = layers.length ? layers[layers.length - 1].draft : saved;
  layers.push({id, key, draft: Object.assign({}, base)}); render(); }
function close(commit) {
  const l = layers.pop();
  if (commit) Object.assign(layers.length ? layers[layers.length - 1].draft : saved, l.draft);
  render(); }
function toggles(l, list) {
  return list.map(([k, label]) => `<p><label class="wide"><input type="checkbox" id="t-${k}"
    data-k="${k}"${l.draft[k] ? ' checked' : ''}> ${label}</label></p>`).join(''); }
function values(l, list) {
  return list.map(([k, label]) => `<p><label for="v-${k}">${label}</label>
    <input id="v-${k}" data-k="${k}" size="8" value="${l.draft[k]}"></p>`).join(''); }
function layerHtml(l) {
  if (l.id === 'settings') return `<h3>Settings</h3>` + D.cats.map((c) =>
    `<p><button class="sect" data-cat="${c.key}">${c.name} ›</button></p>`).join('') +
    `<p class="foot"><button class="primary" id="s1-save">Save</button>
     <button id="s1-close">Close</button></p>`;
  const c = cat(l.key);
  if (l.id.startsWith('cat:')) return `<h3>${c.name}</h3>` + toggles(l, c.basic) +
    `<p><button id="adv-open">${D.adv}…</button></p><p class="foot">
     <button class="primary" id="s2-save">Save</button><button id="s2-cancel">Cancel</button></p>`;
  return `<h3>${c.name}: ${D.adv}</h3>` + toggles(l, c.adv) + values(l, c.vals) +
    `<p class="foot"><button class="primary" id="s3-apply">Apply</button>
     <button id="s3-cancel">Cancel</button></p>`; }
function render() {
  document.querySelectorAll('.modal').forEach((m) => m.remove());
  layers.forEach((l, i) => {
    const m = document.createElement('div');
    m.className = 'modal'; m.style.zIndex = 10 + i; m.style.paddingTop = (i * 70) + 'px';
    m.innerHTML = `<div class="card" id="dlg-${l.id.split(':')[0]}">${layerHtml(l)}</div>`;
    document.body.appendChild(m); }); }
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'); if (!b) return;
  const top = layers[layers.length - 1];
  if (b.id === 'open-settings' && !layers.length) open('settings');
  else if (b.dataset.cat) open('cat:' + b.dataset.cat, b.dataset.cat);
  else if (b.id === 'adv-open') open('adv:' + top.key, top.key);
  else if (['s1-save', 's2-save', 's3-apply'].includes(b.id)) close(true);
  else if (['s1-close', 's2-cancel', 's3-cancel'].includes(b.id)) close(false);
  else if (b.id === 'help') document.getElementById('helptext').classList.toggle('hidden'); });
document.addEventListener('change', (e) => {
  if (e.target.type === 'checkbox') layers[layers.length - 1].draft[e.target.dataset.k] =
    e.target.checked; });
document.addEventListener('input', (e) => {
  if (e.target.id.startsWith('v-')) layers[layers.length - 1].draft[e.target.dataset.k] =
    e.target.value; });
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && layers.length) close(false); });
window.kvhState = () => ({
  stack: layers.map((l) => l.id), drafts: layers.map((l) => Object.assign({}, l.draft)),
  saved: Object.assign({}, saved) });
"""

_STYLE = """
.modal > .card { min-width: 460px; max-height: 600px; overflow: auto; }
label.wide { min-width: 320px; } button.sect { min-width: 220px; text-align: left; }
.foot { border-top: 1px solid #cfd6e0; padding-top: 10px; text-align: right; }
"""


def _stack(s: State) -> list[Any]:
    stack = s.get("stack")
    return stack if isinstance(stack, list) else []


def _layer(s: State, i: int, stack: list[str]) -> dict[str, Any] | None:
    """The draft of dialog ``i`` when exactly the dialogs ``stack`` are open, else None."""
    drafts = s.get("drafts")
    if s.get("stack") != stack or not isinstance(drafts, list) or len(drafts) <= i:
        return None
    d = drafts[i]
    return d if isinstance(d, dict) else None


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    names = rng.sample(_SECTIONS, rng.randint(4, 6))
    adv = rng.choice(_ADVANCED)
    cats: list[dict[str, Any]] = []
    init: dict[str, Any] = {}
    limits: dict[str, tuple[int, int]] = {}
    for ci, name in enumerate(names):
        labels = rng.sample(_TOGGLES, 6)
        tog = [[f"c{ci}t{j}", label] for j, label in enumerate(labels)]
        vals = []
        for j, (label, lo, hi) in enumerate(rng.sample(_VALUES, 2)):
            vals.append([f"c{ci}v{j}", label])
            init[f"c{ci}v{j}"] = str(rng.randint(lo, hi))
            limits[f"c{ci}v{j}"] = (lo, hi)
        for key, _ in tog:
            init[key] = rng.random() < 0.5
        cats.append({"key": f"c{ci}", "name": name, "basic": tog[:2], "adv": tog[2:], "vals": vals})
    target = rng.choice(cats)
    tkey, tlabel = rng.choice(target["adv"])
    vkey, vlabel = rng.choice(target["vals"])
    lo, hi = limits[vkey]
    value = str(rng.choice([n for n in range(lo, hi + 1) if str(n) != init[vkey]]))
    turn_on = not init[tkey]
    expected = dict(init, **{tkey: turn_on, vkey: value})

    def has_values(d: dict[str, Any] | None) -> bool:
        return d is not None and d.get(tkey) is turn_on and str(d.get(vkey, "")).strip() == value

    def saved_ok(s: State) -> bool:
        got = s.get("saved")
        if s.get("stack") != [] or not isinstance(got, dict) or set(got) != set(expected):
            return False
        return has_values(got) and all(got[k] == v for k, v in expected.items() if k != vkey)

    ckey, akey = f"cat:{target['key']}", f"adv:{target['key']}"
    full = ["settings", ckey, akey]
    milestones = (
        Milestone("settings opened", lambda s: _stack(s)[:1] == full[:1]),
        Milestone("section opened", lambda s: _stack(s)[:2] == full[:2]),
        Milestone("advanced opened", lambda s: _layer(s, 2, full) is not None),
        Milestone("values set", lambda s: has_values(_layer(s, 2, full))),
        Milestone("advanced applied", lambda s: has_values(_layer(s, 1, full[:2]))),
        Milestone("section saved", lambda s: has_values(_layer(s, 0, full[:1]))),
        Milestone("settings saved", saved_ok),
    )
    oracle = (
        Click("#open-settings"),
        Click(f"button[data-cat='{target['key']}']"),
        Click("#adv-open"),
        Click(f"#t-{tkey}"),
        Click(f"#v-{vkey}"),
        Press("Control+a"),
        TypeText(value),
        Click("#s3-apply"),
        Click("#s2-save"),
        Click("#s1-save"),
    )
    body = (
        "<div class='card'><h3>Workspace</h3><p>Signed in as <b>team-admin</b>.</p>"
        "<button class='primary' id='open-settings'>Settings</button>"
        "<button id='help'>Help</button><p id='helptext' class='hidden'>"
        "Changes in a dialog take effect only when it is saved.</p></div>"
    )
    instruction = (
        f"Open Settings, go to the {target['name']} section and open its {adv} dialog. "
        f"Turn {'on' if turn_on else 'off'} \u201c{tlabel}\u201d and set \u201c{vlabel}\u201d "
        f"to {value}. Then click Apply in the {adv} dialog, Save in the {target['name']} "
        "dialog, and Save in Settings."
    )
    script = f"const D = {js({'cats': cats, 'init': init, 'adv': adv})};{_SCRIPT}"
    return WebTask(
        family="settings-deep",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Workspace", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("settings-deep", "change two settings three dialogs deep and save each", build)
