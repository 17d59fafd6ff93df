"""Expand a nested tree down to a named node, label it from the toolbar, and collapse a branch."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, State, WebTask

_LEVELS = (
    ("Engineering", "Marketing", "Sales", "Finance", "Operations", "Research", "Legal", "Support"),
    ("Platform", "Mobile", "Growth", "Partners", "Analytics", "Infrastructure", "Content",
     "Payroll", "Compliance"),
    ("Roadmap", "Budget", "Hiring", "Launch", "Audit", "Metrics", "Planning", "Vendors"),
    ("Q1 notes", "Q2 notes", "Summary", "Contracts", "Drafts", "Archive", "Templates"),
)  # fmt: skip
_LABELS = ("Urgent", "Review", "Approved", "Confidential", "Archived", "Shared")
_COLOURS = ("#f6d5d5", "#fde8c4", "#d4efd9", "#e2d9f7", "#dde3ea", "#cfe6f7")

_SCRIPT = """
const N = Object.fromEntries(D.nodes.map((n) => [n.id, n]));
const open = new Set(D.expanded), L = JSON.parse(JSON.stringify(D.labels));
let selected = null;
const $ = (id) => document.getElementById(id);
function rows(ids) {
  return ids.map((id) => { const n = N[id], kids = n.children.length, o = open.has(id);
    const chips = (L[id] || []).map((l) =>
      `<span class="chip" style="background:${D.colours[l]}">${l}</span>`).join('');
    return `<div class="node${id === selected ? ' sel' : ''}" data-id="${id}"
      style="padding-left:${8 + n.depth * 26}px">` + (kids ? `<button class="tog">` +
      `${o ? '\u25be' : '\u25b8'}</button>` : '<span class="leaf"></span>') +
      `<span class="name">${n.name}</span>${chips}</div>` + (kids && o ? rows(n.children) : '');
  }).join(''); }
function render() {
  $('tree').innerHTML = rows(D.roots);
  $('picked').textContent = selected ? 'Selected: ' + N[selected].name : 'Nothing selected';
  document.querySelectorAll('.lab').forEach((b) => { b.disabled = !selected; });
}
document.addEventListener('click', (e) => {
  const t = e.target, row = t.closest('.node');
  if (row && t.classList.contains('tog')) {
    const id = row.dataset.id; if (open.has(id)) open.delete(id); else open.add(id); }
  else if (row) selected = row.dataset.id;
  else if (t.classList.contains('lab') && selected) {
    const l = t.dataset.l, have = L[selected] || (L[selected] = []);
    if (have.includes(l)) have.splice(have.indexOf(l), 1); else have.push(l);
    if (!have.length) delete L[selected]; }
  else return;
  render();
});
render();
window.kvhState = () => ({ expanded: [...open].sort(), selected,
  labels: JSON.parse(JSON.stringify(L)) });
"""

_STYLE = """
.node { display: flex; align-items: center; height: 30px; cursor: pointer; }
.node.sel .name { background: #2f6fdb; color: #fff; border-radius: 3px; }
.tog { width: 26px; height: 24px; padding: 0; margin: 0 4px 0 0; font-size: 12px; }
.leaf { width: 30px; } .name { padding: 2px 6px; }
.chip { font-size: 12px; border-radius: 9px; padding: 1px 8px; margin-left: 6px; }
#bar { display: flex; align-items: center; gap: 6px; } #picked { margin-left: 14px; color: #445; }
"""


def _expanded(s: State) -> list[Any]:
    got = s.get("expanded")
    return got if isinstance(got, list) else []


def _labels(s: State, node: str) -> Any:
    got = s.get("labels")
    return got.get(node) if isinstance(got, dict) else None


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []

    def grow(names: list[str], depth: int, parent: dict[str, Any] | None) -> list[str]:
        ids: list[str] = []
        for name in names:
            node: dict[str, Any] = {
                "id": f"n{len(nodes)}",
                "name": name,
                "depth": depth,
                "children": [],
                "path": [*(parent["path"] if parent else []), name],
            }
            nodes.append(node)
            ids.append(node["id"])
            if depth < 3:
                k = rng.randint(2, 3) if depth < 2 else rng.randint(0, 3)
                node["children"] = grow(rng.sample(_LEVELS[depth + 1], k), depth + 1, node)
        return ids

    roots = grow(rng.sample(_LEVELS[0], rng.randint(3, 4)), 0, None)
    by_id = {n["id"]: n for n in nodes}
    depth = rng.choice([d for d in (2, 3) if any(n["depth"] == d for n in nodes)])
    target = rng.choice([n for n in nodes if n["depth"] == depth])
    chain = [target]
    while chain[0]["depth"]:
        chain.insert(0, next(n for n in nodes if chain[0]["id"] in n["children"]))
    ancestors = [n["id"] for n in chain[:-1]]
    branch = by_id[rng.choice([r for r in roots if r != ancestors[0]])]
    expanded = [branch["id"], rng.choice(branch["children"])]
    label = rng.choice(_LABELS)
    labels: dict[str, list[str]] = {}
    for n in rng.sample([n for n in nodes if n is not target], 6):
        labels[n["id"]] = [rng.choice(_LABELS)]
    expected = dict(labels, **{target["id"]: [label]})
    tid, bid = target["id"], branch["id"]

    def opened(k: int) -> Callable[[State], bool]:
        return lambda s: all(a in _expanded(s) for a in ancestors[: k + 1])

    milestones = (
        *[Milestone(f"{by_id[a]['name']} expanded", opened(k)) for k, a in enumerate(ancestors)],
        Milestone("node selected", lambda s: s.get("selected") == tid),
        Milestone("label applied", lambda s: _labels(s, tid) == [label]),
        Milestone(
            "branch collapsed",
            lambda s: isinstance(s.get("expanded"), list) and bid not in _expanded(s),
        ),
        Milestone(
            "tree as asked",
            lambda s: (
                s.get("labels") == expected and s.get("selected") == tid and bid not in _expanded(s)
            ),
        ),
    )
    oracle = (
        *[Click(f".node[data-id='{a}'] > .tog") for a in ancestors],
        Click(f".node[data-id='{tid}'] > .name"),
        Click(f".lab[data-l='{label}']"),
        Click(f".node[data-id='{bid}'] > .tog"),
    )
    shown = rng.sample(_LABELS, 4)
    shown = shown if label in shown else [*shown[:3], label]
    bar = "".join(f"<button class='lab' data-l='{lb}'>{lb}</button>" for lb in sorted(shown))
    body = (
        f"<div class='card' id='bar'><b>Apply label:</b>{bar}<span id='picked'></span></div>"
        "<div class='card' id='tree'></div>"
    )
    path = " \u203a ".join(target["path"])
    instruction = (
        f"In the folder tree, expand the folders down to {path} and select \u201c{target['name']}"
        f"\u201d. Apply the label \u201c{label}\u201d to it from the toolbar. Then collapse the "
        f"\u201c{branch['name']}\u201d branch. Leave the other labels as they are."
    )
    data = {
        "nodes": [{k: n[k] for k in ("id", "name", "depth", "children")} for n in nodes],
        "roots": roots,
        "expanded": expanded,
        "labels": labels,
        "colours": dict(zip(_LABELS, _COLOURS, strict=True)),
    }
    return WebTask(
        family="tree-select",
        seed=seed,
        instruction=instruction,
        files={
            "index.html": page("Folders", body, f"const D = {js(data)};{_SCRIPT}", style=_STYLE)
        },
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("tree-select", "expand a tree to a named node, label it, collapse a branch", build)
