"""Book a meeting: find the named day in a month calendar, pick a free time slot, title, confirm."""

from __future__ import annotations

import calendar
import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import (
    Click,
    Family,
    Milestone,
    OracleStep,
    State,
    TypeText,
    WebTask,
)

_TITLES = (
    "Design review", "Budget sync", "Interview: backend role", "Sprint planning",
    "Customer call with Acme", "1:1 with Priya", "Vendor demo", "Roadmap workshop",
    "Onboarding session", "Retrospective", "Security audit kickoff", "Hiring debrief",
)  # fmt: skip

_SCRIPT = """
let view = D.start, selected = null, slot = null, modal = false;
const bookings = [], title = () => document.getElementById('title').value;
const key = (y, m, d) => `${y}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}`;
const busy = (date) => (D.booked[date] || []).concat(bookings.filter((b) => b.date === date)
  .map((b) => b.time));
function render() {
  const mo = D.months[view];
  document.getElementById('month-title').textContent = mo.name;
  document.getElementById('prev').disabled = view === 0;
  document.getElementById('next').disabled = view === D.months.length - 1;
  const cells = Array(mo.lead).fill('<td></td>');
  for (let d = 1; d <= mo.days; d++) {
    const k = key(mo.y, mo.m, d), n = busy(k).length;
    cells.push(`<td><button class="day${k === selected ? ' sel' : ''}" data-date="${k}">` +
      `<b>${d}</b><small>${n ? n + ' busy' : ''}</small></button></td>`); }
  while (cells.length % 7) cells.push('<td></td>');
  let rows = '';
  for (let i = 0; i < cells.length; i += 7)
    rows += '<tr>' + cells.slice(i, i + 7).join('') + '</tr>';
  document.getElementById('grid').innerHTML =
    '<tr>' + D.week.map((w) => `<th>${w}</th>`).join('') + '</tr>' + rows;
  document.getElementById('picked').textContent = selected ? D.labels[selected] : 'No day selected';
  const taken = selected ? busy(selected) : [];
  document.getElementById('slots').innerHTML = selected ? D.slots.map((t) => taken.includes(t)
    ? `<button class="slot" disabled>${t} (busy)</button>`
    : `<button class="slot${t === slot ? ' sel' : ''}" data-t="${t}">${t}</button>`).join('') : '';
  const m = document.getElementById('confirm-modal');
  m.classList.toggle('hidden', !modal);
  if (modal) document.getElementById('summary').textContent =
    `\u201c${title().trim()}\u201d on ${D.labels[selected]} at ${slot}`;
}
document.addEventListener('click', (e) => {
  const t = e.target.closest('button'); if (!t) return;
  const err = document.getElementById('err');
  if (t.id === 'prev' && view > 0) view -= 1;
  else if (t.id === 'next' && view < D.months.length - 1) view += 1;
  else if (t.classList.contains('day')) { if (t.dataset.date !== selected) slot = null;
    selected = t.dataset.date; }
  else if (t.dataset.t) slot = t.dataset.t;
  else if (t.id === 'book') {
    err.textContent = !selected || !slot ? 'Choose a day and a time slot.'
      : !title().trim() ? 'Enter a title for the meeting.' : '';
    modal = !err.textContent; }
  else if (t.id === 'cancel') modal = false;
  else if (t.id === 'confirm' && modal) {
    bookings.push({date: selected, time: slot, title: title().trim()});
    modal = false; slot = null;
    document.getElementById('done').textContent = 'Meeting booked.'; }
  render();
});
render();
window.kvhState = () => ({ view: D.months[view].name, selected, slot, title: title(), modal,
  bookings: bookings.map((b) => Object.assign({}, b)) });
"""

_STYLE = """
.modal.hidden { display: none; }
.cal { display: flex; gap: 16px; align-items: flex-start; }
#grid td, #grid th { padding: 2px; border: none; background: none; text-align: center; }
#grid th { cursor: default; width: 84px; }
.day { width: 80px; height: 62px; display: flex; flex-direction: column; align-items: center;
       justify-content: center; margin: 0; } .day small { color: #8a4b00; height: 16px; }
.day.sel, .slot.sel { background: #2f6fdb; color: #fff; } .day.sel small { color: #fff; }
.slot { width: 130px; } #side { width: 330px; } .nav { display: flex; align-items: center; }
#month-title { width: 240px; text-align: center; font-size: 19px; font-weight: bold; }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    year, month = rng.randint(2025, 2028), rng.randint(1, 12)
    monday_first = rng.random() < 0.5
    step = rng.choice((30, 60))
    first = rng.choice((8, 9, 10)) * 60
    slots = [f"{t // 60:02d}:{t % 60:02d}" for t in range(first, first + 8 * step, step)]
    months: list[dict[str, Any]] = []
    booked: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    for i in range(4):
        y, m = year + (month - 1 + i) // 12, (month - 1 + i) % 12 + 1
        lead, days = calendar.monthrange(y, m)
        lead = lead if monday_first else (lead + 1) % 7
        months.append(
            {"y": y, "m": m, "name": f"{calendar.month_name[m]} {y}", "lead": lead, "days": days}
        )
        for d in range(1, days + 1):
            k = f"{y}-{m:02d}-{d:02d}"
            labels[k] = f"{calendar.day_name[calendar.weekday(y, m, d)]}, {d} {months[-1]['name']}"
            if rng.random() < 0.6:
                booked[k] = sorted(rng.sample(slots, rng.randint(1, 4)))
    offset = rng.choice((0, 1, 1, 2))
    target = months[offset]
    date = f"{target['y']}-{target['m']:02d}-{rng.randint(1, target['days']):02d}"
    free = [t for t in slots if t not in booked.get(date, [])]
    time = rng.choice(free)
    title = rng.choice(_TITLES)
    week = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    week = week if monday_first else week[-1:] + week[:-1]

    def chosen(s: State) -> bool:
        return s.get("selected") == date and s.get("slot") == time

    def titled(s: State) -> bool:
        return chosen(s) and str(s.get("title", "")).strip() == title

    milestones = (
        Milestone("day selected", lambda s: s.get("selected") == date),
        Milestone("time slot chosen", chosen),
        Milestone("title entered", titled),
        Milestone("confirmation shown", lambda s: titled(s) and s.get("modal") is True),
        Milestone(
            "meeting booked",
            lambda s: (
                s.get("modal") is False
                and s.get("bookings") == [{"date": date, "time": time, "title": title}]
            ),
        ),
    )
    oracle: tuple[OracleStep, ...] = (
        *[Click("#next")] * offset,
        Click(f".day[data-date='{date}']"),
        Click(f".slot[data-t='{time}']"),
        Click("#title"),
        TypeText(title),
        Click("#book"),
        Click("#confirm"),
    )
    body = (
        "<div class='cal'><div class='card'><div class='nav'><button id='prev'>\u2039 Prev</button>"
        "<span id='month-title'></span><button id='next'>Next \u203a</button></div>"
        "<table id='grid'></table></div><div class='card' id='side'><h3 id='picked'></h3>"
        "<div id='slots'></div><p><label for='title'>Meeting title</label></p>"
        "<input id='title' size='30'><p class='error' id='err'></p>"
        "<button class='primary' id='book'>Book</button><p class='ok' id='done'></p></div></div>"
        "<div class='modal hidden' id='confirm-modal'><div class='card'><h3>Confirm booking</h3>"
        "<p id='summary'></p><button class='primary' id='confirm'>Confirm</button>"
        "<button id='cancel'>Cancel</button></div></div>"
    )
    instruction = (
        f"Book a meeting titled \u201c{title}\u201d on {labels[date]} at {time}, "
        "and confirm the booking."
    )
    data = {
        "start": 0,
        "months": months,
        "booked": booked,
        "labels": labels,
        "slots": slots,
        "week": week,
    }
    return WebTask(
        family="calendar-booking",
        seed=seed,
        instruction=instruction,
        files={
            "index.html": page(
                "Calendar", body, script=f"const D = {js(data)};{_SCRIPT}", style=_STYLE
            )
        },
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("calendar-booking", "book a meeting on a named day and time slot", build)
