"""Correct one wrong cell in a spreadsheet (double-click, type, Enter), check the totals, save."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_SHEETS = (
    ("Sales by region", "Region", ("North", "South", "East", "West", "Central", "Coastal",
                                   "Highlands", "Islands", "Metro", "Valley")),
    ("Units by product", "Product", ("Kettle", "Toaster", "Blender", "Mixer", "Juicer", "Grill",
                                     "Fryer", "Steamer", "Scale", "Grinder")),
    ("Hours by team", "Team", ("Design", "Backend", "Frontend", "QA", "Support", "Data",
                               "Infra", "Mobile", "Security", "Docs")),
)  # fmt: skip
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_SCRIPT = """
let cells = D.cells.map((r) => r.slice()), saved = null, editing = null, sel = null, error = '';
const $ = (id) => document.getElementById(id);
const colName = (c) => String.fromCharCode(66 + c);
const totals = () => D.cols.map((_, c) => cells.reduce((t, r) => t + r[c], 0));
function render() {
  const t = totals();
  $('grid').innerHTML = `<tr><th class="hd"></th><th class="hd">A</th>${D.cols.map((_, c) =>
    `<th class="hd">${colName(c)}</th>`).join('')}</tr><tr><th class="hd">1</th><th>${D.rowHead}
    </th>${D.cols.map((c) => `<th>${c}</th>`).join('')}</tr>` + D.rows.map((name, r) =>
    `<tr><th class="hd">${r + 2}</th><td>${name}</td>${cells[r].map((v, c) => `<td class="num${
    sel && sel[0] === r && sel[1] === c ? ' sel' : ''}" data-r="${r}" data-c="${c}">${editing &&
    editing[0] === r && editing[1] === c ? '<input id="editor" size="7">' : v}</td>`).join('')}
    </tr>`).join('') + `<tr class="total"><th class="hd">${D.rows.length + 2}</th><td>Total</td>${
    t.map((v, c) => `<td class="num" id="total-${c}">${v}</td>`).join('')}
    </tr>`;
  $('ref').textContent = sel ? colName(sel[1]) + (sel[0] + 2) + ': ' + cells[sel[0]][sel[1]] : '';
  $('err').textContent = error;
  const ed = $('editor');
  if (ed) { ed.value = cells[editing[0]][editing[1]]; ed.focus(); ed.select(); } }
function commit() {
  const raw = $('editor').value.replace(/[, ]/g, ''), v = Number(raw);
  if (raw === '' || !Number.isFinite(v)) { error = 'Enter a number.'; render(); return; }
  cells[editing[0]][editing[1]] = v; editing = null; error = ''; render(); }
function select(r, c) {
  document.querySelectorAll('td.sel').forEach((td) => td.classList.remove('sel'));
  sel = [r, c]; document.querySelector(`td[data-r="${r}"][data-c="${c}"]`).classList.add('sel');
  $('ref').textContent = colName(c) + (r + 2) + ': ' + cells[r][c]; }
document.addEventListener('click', (e) => {
  if (e.target.id === 'editor') return;
  if (editing) commit();
  const td = e.target.closest('td[data-r]');
  if (td && !editing) select(+td.dataset.r, +td.dataset.c); });
$('grid').addEventListener('dblclick', (e) => {
  const td = e.target.closest('td[data-r]');
  if (td && !editing) { sel = editing = [+td.dataset.r, +td.dataset.c]; error = ''; render(); } });
document.addEventListener('keydown', (e) => {
  if (editing && e.key === 'Enter') { e.preventDefault(); commit(); }
  else if (editing && e.key === 'Escape') { editing = null; error = ''; render(); } });
$('save').addEventListener('click', () => {
  if (editing) commit();
  if (editing) return;
  saved = cells.map((r) => r.slice()); $('msg').textContent = 'Saved.'; });
render();
window.kvhState = () => ({cells, totals: totals(), editing,
  editorValue: $('editor') ? $('editor').value : null, saved});
"""

_STYLE = """
#grid td, #grid th { padding: 4px 12px; min-width: 80px; } td.num { text-align: right; }
th.hd { background: #d5dbe5; color: #57606f; font-weight: normal; min-width: 30px; }
td.sel { outline: 2px solid #2f6fdb; } tr.total td { font-weight: bold; background: #f3f5f8; }
#editor { width: 70px; padding: 0 4px; margin: 0; text-align: right; }
.bar span { margin-left: 12px; }
"""


def _cell(s: State, r: int, c: int) -> Any:
    cells = s.get("cells")
    if isinstance(cells, list) and len(cells) > r and isinstance(cells[r], list):
        return cells[r][c] if len(cells[r]) > c else None
    return None


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    title, row_head, pool = rng.choice(_SHEETS)
    rows = rng.sample(pool, rng.randint(5, 8))
    start = rng.randrange(12)
    cols = [_MONTHS[(start + i) % 12] for i in range(rng.randint(4, 6))]
    lo, hi = rng.choice(((100, 999), (1000, 9999)))
    good = [[rng.randint(lo, hi) for _ in cols] for _ in rows]
    r, c = rng.randrange(len(rows)), rng.randrange(len(cols))
    right = good[r][c]
    digits = list(str(right))
    i = rng.randrange(len(digits) - 1)
    digits[i], digits[i + 1] = digits[i + 1], digits[i]
    wrong = int("".join(digits))
    if wrong == right or digits[0] == "0":
        wrong = right + lo if right + lo <= hi else right - lo
    shown = [row[:] for row in good]
    shown[r][c] = wrong
    total = sum(row[c] for row in good)

    def typed(s: State) -> bool:
        v = s.get("editorValue")
        return (
            s.get("editing") == [r, c]
            and isinstance(v, str)
            and v.replace(",", "").strip() == str(right)
        )

    def fixed(s: State) -> bool:
        t = s.get("totals")
        ok_total = isinstance(t, list) and len(t) > c and t[c] == total
        return s.get("editing") is None and _cell(s, r, c) == right and ok_total

    milestones = (
        Milestone("cell opened for editing", lambda s: s.get("editing") == [r, c]),
        Milestone("correct value typed", typed),
        Milestone("cell corrected, total updated", fixed),
        Milestone("sheet saved", lambda s: s.get("saved") == good and s.get("cells") == good),
    )
    oracle = (
        Click(f"td[data-r='{r}'][data-c='{c}']", 2),
        Press("Control+a"),
        TypeText(str(right)),
        Press("Enter"),
        Click("#save"),
    )
    body = (
        f"<div class='card bar'><b>{title}</b><span id='ref'></span><span class='error' id='err'>"
        "</span><span class='ok' id='msg'></span></div><table id='grid'></table>"
        "<p><button class='primary' id='save'>Save sheet</button></p>"
    )
    instruction = (
        f"In the {title} sheet, the {cols[c]} value for {rows[r]} was entered as {wrong}; it "
        f"should be {right}. Double-click that cell, replace the value with {right}, press "
        "Enter, check that the Total row updates, and click Save sheet."
    )
    data = {"rows": rows, "cols": cols, "cells": shown, "rowHead": row_head}
    return WebTask(
        family="spreadsheet-fix",
        seed=seed,
        instruction=instruction,
        files={"index.html": page(title, body, f"const D = {js(data)};{_SCRIPT}", style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("spreadsheet-fix", "correct one wrong spreadsheet cell and save", build)
