"""Book a stay: pick check-in and check-out in popup month calendars, set guests, submit."""

from __future__ import annotations

import datetime as dt
import random

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, OracleStep, State, WebTask

_HOTELS = ("Seaside Inn", "Alpine Lodge", "Harbour View Hotel", "Old Town Suites", "Lakeside B&B")
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip

_SCRIPT = """
let dates = {checkin: null, checkout: null}, guests = D.guests, pop = null, booked = null;
let err = '';
const $ = (id) => document.getElementById(id);
const iso = (y, m, d) => `${y}-${String(m + 1).padStart(2, '0')}-${String(d).padStart(2, '0')}`;
const nice = (s) => { const [y, m, d] = s.split('-').map(Number);
  return `${d} ${D.months[m - 1]} ${y}`; };
function openPop(field) {
  const base = dates[field] || (field === 'checkout' && dates.checkin) || D.today;
  const [y, m] = base.split('-').map(Number);
  pop = {field, y, m: m - 1}; }
function grid() {
  const {y, m} = pop, first = new Date(Date.UTC(y, m, 1)).getUTCDay();
  const days = new Date(Date.UTC(y, m + 1, 0)).getUTCDate();
  let cells = D.weekdays.map((w) => `<th>${w}</th>`).join('');
  let row = '<tr>' + '<td></td>'.repeat((first + 6) % 7), n = (first + 6) % 7, out = '';
  for (let d = 1; d <= days; d++) {
    const s = iso(y, m, d), past = s < D.today;
    row += `<td><button class="day${dates[pop.field] === s ? ' sel' : ''}${s === D.today ?
      ' today' : ''}" data-date="${s}"
      ${past ? 'disabled' : ''}>${d}</button></td>`;
    if (++n % 7 === 0) { out += row + '</tr>'; row = '<tr>'; } }
  out += row + '</tr>';
  return `<div class="cal" id="cal"><div class="calhead"><button id="cal-prev">&#9664;</button>
    <b id="cal-month">${D.months[m]} ${y}</b><button id="cal-next">&#9654;</button></div>
    <table><tr>${cells}</tr>${out}</table></div>`; }
function render() {
  ['checkin', 'checkout'].forEach((f) => {
    $(f + '-btn').textContent = dates[f] ? nice(dates[f]) : 'Select date';
    $(f + '-pop').innerHTML = pop && pop.field === f ? grid() : ''; });
  $('guests').textContent = guests;
  $('err').textContent = err;
  $('done').textContent = booked ? `Booked: ${nice(booked.checkin)} to ${nice(booked.checkout)},
    ${booked.guests} guest(s).` : ''; }
document.addEventListener('click', (e) => {
  const b = e.target.closest('button');
  if (!b) { if (!e.target.closest('.cal')) pop = null; render(); return; }
  if (b.id === 'checkin-btn' || b.id === 'checkout-btn') {
    const f = b.id.split('-')[0];
    if (pop && pop.field === f) pop = null; else openPop(f); }
  else if (b.id === 'cal-prev' || b.id === 'cal-next') {
    pop.m += b.id === 'cal-next' ? 1 : -1;
    if (pop.m < 0) { pop.m = 11; pop.y -= 1; } else if (pop.m > 11) { pop.m = 0; pop.y += 1; } }
  else if (b.classList.contains('day')) { dates[pop.field] = b.dataset.date; pop = null; }
  else if (b.id === 'minus' && guests > 1) guests -= 1;
  else if (b.id === 'plus' && guests < D.maxGuests) guests += 1;
  else if (b.id === 'submit') {
    if (!dates.checkin || !dates.checkout) err = 'Choose both dates.';
    else if (dates.checkout <= dates.checkin) err = 'Check-out must be after check-in.';
    else { err = ''; booked = {checkin: dates.checkin, checkout: dates.checkout, guests}; } }
  render(); });
document.addEventListener('keydown', (e) => { if (e.key === 'Escape') { pop = null; render(); } });
window.kvhState = () => ({checkin: dates.checkin, checkout: dates.checkout, guests,
  calendar: pop ? Object.assign({}, pop) : null, error: err, booked});
render();
"""

_STYLE = """
.field { position: relative; display: inline-block; } .field > button { min-width: 200px;
  text-align: left; } .pop { position: absolute; top: 40px; left: 0; z-index: 5; }
.cal { background: #fff; border: 1px solid #8a97ab; border-radius: 6px; padding: 8px;
  box-shadow: 0 4px 14px rgba(0, 0, 0, .2); width: 300px; }
.calhead { display: flex; justify-content: space-between; align-items: center; }
.cal table, .cal td, .cal th { border: none; padding: 1px; text-align: center; background: none; }
.cal th { cursor: default; font-size: 12px; color: #66708a; }
button.day { width: 36px; padding: 4px 0; margin: 0; } button.day.sel { background: #2f6fdb;
  color: #fff; } button.day:disabled { color: #b5bccb; cursor: default; }
button.day.today { border: 2px solid #f2b84b; }
#guests { display: inline-block; width: 36px; text-align: center; font-weight: bold; }
.row { margin: 16px 0; }
"""


def _months_between(a: dt.date, b: dt.date) -> int:
    return (b.year - a.year) * 12 + b.month - a.month


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    today = dt.date(rng.randint(2024, 2027), rng.randint(1, 12), rng.randint(1, 28))
    checkin = today + dt.timedelta(days=rng.randint(3, 55))
    checkout = checkin + dt.timedelta(days=rng.randint(1, 12))
    start_guests, max_guests = rng.randint(1, 2), rng.choice((6, 8))
    guests = rng.choice([g for g in range(1, 6) if g != start_guests])
    hotel = rng.choice(_HOTELS)
    week = ("Mo", "Tu", "We", "Th", "Fr", "Sa", "Su")
    want = {"checkin": checkin.isoformat(), "checkout": checkout.isoformat(), "guests": guests}

    def dates_ok(s: State, *keys: str) -> bool:
        return all(s.get(k) == want[k] for k in keys)

    milestones = (
        Milestone("check-in chosen", lambda s: dates_ok(s, "checkin")),
        Milestone("check-out chosen", lambda s: dates_ok(s, "checkin", "checkout")),
        Milestone("guests set", lambda s: dates_ok(s, "checkin", "checkout", "guests")),
        Milestone("booking submitted", lambda s: s.get("booked") == want),
    )
    oracle: list[OracleStep] = [Click("#checkin-btn")]
    oracle += [Click("#cal-next")] * _months_between(today, checkin)
    oracle += [Click(f"#cal button[data-date='{want['checkin']}']"), Click("#checkout-btn")]
    oracle += [Click("#cal-next")] * _months_between(checkin, checkout)
    oracle += [Click(f"#cal button[data-date='{want['checkout']}']")]
    oracle += [Click("#plus" if guests > start_guests else "#minus")] * abs(guests - start_guests)
    oracle.append(Click("#submit"))
    body = (
        f"<div class='card'><h3>{hotel}: book your stay</h3>"
        "<div class='row'><label>Check-in</label><span class='field'>"
        "<button id='checkin-btn'></button><div class='pop' id='checkin-pop'></div></span></div>"
        "<div class='row'><label>Check-out</label><span class='field'>"
        "<button id='checkout-btn'></button><div class='pop' id='checkout-pop'></div></span></div>"
        "<div class='row'><label>Guests</label><button id='minus'>&minus;</button>"
        f"<span id='guests'></span><button id='plus'>+</button> (at most {max_guests})</div>"
        "<p class='error' id='err'></p><button class='primary' id='submit'>Book now</button>"
        " <span class='ok' id='done'></span></div>"
    )

    def nice(d: dt.date) -> str:
        return f"{_MONTHS[d.month - 1]} {d.day}, {d.year}"

    instruction = (
        f"Book a stay at {hotel}: check in on {nice(checkin)}, check out on {nice(checkout)}, "
        f"for {guests} guest{'s' if guests > 1 else ''}. Then click Book now."
    )
    data = {"today": today.isoformat(), "guests": start_guests, "maxGuests": max_guests,
            "months": _MONTHS, "weekdays": week}  # fmt: skip
    script = f"const D = {js(data)};{_SCRIPT}"
    return WebTask(
        family="date-picker",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Reservations", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=tuple(oracle),
    )


FAMILY = Family("date-picker", "pick check-in/out dates in popup calendars and book", build)
