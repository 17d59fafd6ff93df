"""Fill a four-tab profile wizard whose Next buttons validate each tab, then finish it."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, OracleStep, State, TypeText, WebTask

_FIRST = ("Maya", "Jonas", "Priya", "Omar", "Elena", "Kenji", "Sofia", "Tariq", "Ingrid", "Luis")
_LAST = ("Castillo", "Nakamura", "Okafor", "Lindqvist", "Haddad", "Moreau", "Patel", "Novak")
_STREETS = ("Elm Street", "Harbour Road", "Linden Avenue", "Mill Lane", "Station Road", "Oak Way")
_CITIES = ("Bristol", "Portland", "Utrecht", "Leeds", "Halifax", "Dunedin", "Aarhus", "Porto")
_CONTACT = ("Email", "Phone", "Post")
_THEMES = ("Light", "Dark", "System")
_TABS = ("Personal", "Address", "Preferences", "Review")

_SCRIPT = """
let tab = 0, finished = null, err = '';
const $ = (id) => document.getElementById(id);
const radio = (n) => { const c = document.querySelector(`input[name=${n}]:checked`);
  return c ? c.value : null; };
function values() {
  const v = {};
  D.fields.forEach((f) => { v[f.id] = $(f.id).value.trim(); });
  v.contact = radio('contact'); v.theme = radio('theme'); v.newsletter = $('newsletter').checked;
  return v; }
function render() {
  document.querySelectorAll('.pane').forEach((p, i) => p.classList.toggle('hidden', i !== tab));
  document.querySelectorAll('.tab').forEach((t, i) => {
    t.classList.toggle('cur', i === tab); });
  $('back').classList.toggle('hidden', tab === 0 || finished !== null);
  $('next').classList.toggle('hidden', tab === 3);
  $('finish').classList.toggle('hidden', tab !== 3 || finished !== null);
  $('err').textContent = err;
  if (tab === 3) { const v = values(); $('summary').innerHTML = D.fields.map((f) =>
    `<tr><td>${f.label}</td><td>${v[f.id] || '—'}</td></tr>`).join('') +
    `<tr><td>Contact by</td><td>${v.contact}</td></tr><tr><td>Theme</td><td>${v.theme}</td></tr>
     <tr><td>Newsletter</td><td>${v.newsletter ? 'Yes' : 'No'}</td></tr>`; } }
function missing() {
  const v = values();
  const f = D.fields.find((f) => f.tab === tab && f.required && !v[f.id]);
  if (f) return f.label + ' is required.';
  if (tab === 0 && v.email && !/^[^@ ]+@[^@ ]+[.][a-z]+$/.test(v.email)) return 'Email is not valid.';
  if (tab === 2 && !v.contact) return 'Choose how we should contact you.';
  return ''; }
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'); if (!b) return;
  if (b.id === 'next') { err = missing(); if (!err) tab += 1; }
  else if (b.id === 'back') { err = ''; tab -= 1; }
  else if (b.id === 'finish') { finished = values(); $('done').classList.remove('hidden'); }
  render(); });
window.kvhState = () => ({tab: D.tabs[tab], error: err, values: values(), finished});
render();
"""

_STYLE = """
.tabs { display: flex; gap: 4px; margin-bottom: 12px; }
.tab { padding: 8px 18px; border: 1px solid #cfd6e0; border-radius: 6px 6px 0 0; background: #e3e8f0;
  color: #55607a; } .tab.cur { background: #fff; color: #1d2230; font-weight: bold; }
.pane { min-height: 300px; } .pane label { min-width: 200px; }
.pane label.opt { min-width: 0; margin-right: 18px; }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    person = {
        "first": first, "last": last,
        "email": f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
        "phone": f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
        "street": f"{rng.randint(2, 240)} {rng.choice(_STREETS)}", "city": rng.choice(_CITIES),
        "postcode": f"{rng.randint(10000, 99999)}", "unit": f"Flat {rng.randint(1, 40)}",
        "company": rng.choice(("Acme Ltd", "Blue Fjord AS", "Kite Labs", "Orchard & Co")),
    }  # fmt: skip
    labels = {"first": "First name", "last": "Last name", "email": "Email", "phone": "Phone",
              "street": "Street", "city": "City", "postcode": "Postal code",
              "company": "Company", "unit": "Apartment / unit"}  # fmt: skip
    tab_of = {"first": 0, "last": 0, "email": 0, "phone": 0, "company": 0,
              "street": 1, "city": 1, "postcode": 1, "unit": 1}  # fmt: skip
    optional = {"phone", "company", "unit"}
    ids = list(labels)
    rng.shuffle(ids)
    ids.sort(key=lambda f: tab_of[f])
    fields: list[dict[str, Any]] = [
        {"id": f, "label": labels[f], "tab": tab_of[f], "required": f not in optional} for f in ids
    ]
    given = {f: v for f, v in person.items() if f not in optional or rng.random() < 0.5}
    contact, theme = rng.choice(_CONTACT), rng.choice(_THEMES)
    newsletter = rng.random() < 0.5
    expected: dict[str, Any] = {f["id"]: given.get(f["id"], "") for f in fields}
    expected |= {"contact": contact, "theme": theme, "newsletter": newsletter}

    def fields_ok(s: State, upto: int) -> bool:
        v = s.get("values")
        return isinstance(v, dict) and all(
            v.get(f["id"]) == expected[f["id"]] for f in fields if f["tab"] <= upto
        )

    def reached(s: State, name: str) -> bool:
        t = s.get("tab")
        return t in _TABS and _TABS.index(t) >= _TABS.index(name)

    milestones = (
        Milestone("personal details entered", lambda s: fields_ok(s, 0)),
        Milestone("personal tab done", lambda s: reached(s, "Address") and fields_ok(s, 0)),
        Milestone("address done", lambda s: reached(s, "Preferences") and fields_ok(s, 1)),
        Milestone(
            "preferences done", lambda s: reached(s, "Review") and s.get("values") == expected
        ),
        Milestone("wizard finished", lambda s: s.get("finished") == expected),
    )
    oracle: list[OracleStep] = []
    for t in range(2):
        for f in fields:
            if f["tab"] == t and f["id"] in given:
                oracle += [Click(f"#{f['id']}"), TypeText(given[f["id"]])]
        oracle.append(Click("#next"))
    oracle += [Click(f"input[name=contact][value={contact}]")]
    oracle += [Click(f"input[name=theme][value={theme}]")] if theme != "System" else []
    oracle += [Click("#newsletter")] if newsletter else []
    oracle += [Click("#next"), Click("#finish")]

    def pane(t: int) -> str:
        return "".join(
            f"<p><label for='{f['id']}'>{f['label']}{'' if f['required'] else ' (optional)'}"
            f"{' *' if f['required'] else ''}</label><input id='{f['id']}' size='32'></p>"
            for f in fields
            if f["tab"] == t
        )

    def radios(name: str, opts: tuple[str, ...], default: str | None) -> str:
        return "".join(
            f"<label class='opt'><input type='radio' name='{name}' value='{o}'"
            f"{' checked' if o == default else ''}> {o}</label>"
            for o in opts
        )

    prefs = (
        f"<p><label>Contact me by *</label>{radios('contact', _CONTACT, None)}</p>"
        f"<p><label>Theme</label>{radios('theme', _THEMES, 'System')}</p>"
        "<p><label class='opt'><input type='checkbox' id='newsletter'> "
        "Send me the monthly newsletter</label></p>"
    )
    panes = [pane(0), pane(1), prefs, "<h4>Check your details</h4><table id='summary'></table>"]
    body = (
        "<div class='card'><div class='tabs'>"
        + "".join(f"<div class='tab'>{i + 1}. {t}</div>" for i, t in enumerate(_TABS))
        + "</div>"
        + "".join(f"<div class='pane'>{p}</div>" for p in panes)
        + "<p class='error' id='err'></p><p><button id='back'>Back</button>"
        "<button class='primary' id='next'>Next</button>"
        "<button class='primary' id='finish'>Finish</button></p>"
        "<p class='ok hidden' id='done'>Profile saved.</p></div>"
    )
    extra = [
        f"{labels[f].lower().replace(' / ', '/')} {v}" for f, v in given.items() if f in optional
    ]
    instruction = (
        f"Complete the profile wizard for {first} {last}: email {person['email']}, address "
        f"{person['street']}, {person['city']}, postal code {person['postcode']}"
        + "".join(f", {e}" for e in extra)
        + " (leave any other optional field empty). "
        f"Preferences: contact by {contact}, {theme} theme, and "
        f"{'subscribe to' if newsletter else 'no'} newsletter. Then finish the wizard."
    )
    script = f"const D = {js({'fields': fields, 'tabs': _TABS})};{_SCRIPT}"
    return WebTask(
        family="wizard",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Profile setup", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=tuple(oracle),
    )


FAMILY = Family("wizard", "fill a multi-tab wizard with per-tab validation and finish", build)
