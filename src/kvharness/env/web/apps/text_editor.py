"""Replace every occurrence of a word with Find/Replace, correct one named line, and save."""

from __future__ import annotations

import random

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_PAIRS = (
    ("server", "host"), ("customer", "client"), ("draft", "proposal"), ("widget", "gadget"),
    ("report", "summary"), ("manager", "lead"), ("invoice", "receipt"), ("meeting", "call"),
)  # fmt: skip
_WITH = (
    "The {w} was mentioned twice in the last review.",
    "Please send the {w} details to the whole team.",
    "We expect the {w} to be ready by the end of the sprint.",
    "Nobody has updated the {w} notes since last quarter.",
    "Ask Dana whether the {w} needs a second look.",
    "Each {w} entry must have an owner and a due date.",
    "Keep the {w} list short and easy to scan.",
)
_FIXABLE = (
    ("Remember to confirm the final figures before noon.", "confirm", "confrim"),
    ("The difference between the two budgets is still open.", "difference", "diffrence"),
    ("It is necessary that everyone signs the new policy.", "necessary", "neccessary"),
    ("The outage occurred during the night shift.", "occurred", "occured"),
    ("Add the launch date to the shared calendar.", "calendar", "calender"),
    ("Nothing will change until the board approves it.", "until", "untill"),
    ("Our next step is to schedule the remaining tasks.", "schedule", "schedual"),
)
_FILLER = (
    "Status notes for the platform team.", "All times below are in UTC.",
    "Questions go to the project channel.", "Thanks to everyone who helped this week.",
    "Open items are listed at the end.", "See the appendix for the full history.",
)  # fmt: skip

_SCRIPT = """
let saved = null, dialog = false;
const $ = (id) => document.getElementById(id);
function lines() {
  $('gutter').textContent = $('doc').value.split('\\n').map((_, i) => i + 1).join('\\n');
  const dirty = $('doc').value !== (saved === null ? D.text : saved);
  $('status').textContent = saved !== null && !dirty ? 'Saved.' : dirty ? 'Unsaved changes' : '';
}
$('doc').value = D.text; lines();
$('doc').addEventListener('input', lines);
document.addEventListener('click', (e) => {
  const t = e.target;
  if (t.id === 'find-open') {
    dialog = true; $('fr').classList.remove('hidden'); $('find').focus(); }
  else if (t.id === 'close-find') { dialog = false; $('fr').classList.add('hidden'); }
  else if (t.id === 'replace-all') {
    const f = $('find').value, doc = $('doc');
    const n = f ? doc.value.split(f).length - 1 : 0;
    if (n) doc.value = doc.value.split(f).join($('replace').value);
    $('fr-result').textContent = n ? `Replaced ${n} occurrence${n > 1 ? 's' : ''}.`
      : 'No matches.';
    lines(); }
  else if (t.id === 'save') { saved = $('doc').value; lines(); }
});
window.kvhState = () => ({ text: $('doc').value, saved, dialog, find: $('find').value,
  replace: $('replace').value });
"""

_STYLE = """
.editor { display: flex; border: 1px solid #8a97ab; background: #fff; width: 840px; }
#gutter, #doc { font: 15px/22px "DejaVu Sans Mono", monospace; margin: 0; padding: 8px; }
#gutter { color: #889; background: #eef1f5; text-align: right; min-width: 44px; }
#doc { flex: 1; border: none; border-radius: 0; resize: none; outline: none; white-space: pre;
       overflow: hidden; }
#fr { position: fixed; top: 70px; right: 24px; width: 360px; z-index: 5;
      box-shadow: 0 4px 16px rgba(0, 0, 0, .25); } #fr label { min-width: 80px; }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    word, repl = rng.choice(_PAIRS)
    fix, *others = rng.sample(_FIXABLE, 4)
    fixed, good, bad = fix
    lines = [
        *(u.replace("{w}", word) for u in rng.sample(_WITH, rng.randint(3, 5))),
        *(o[0] for o in others),
        *rng.sample(_FILLER, 3),
    ]
    rng.shuffle(lines)
    at = rng.randrange(1, len(lines))
    lines.insert(at, fixed.replace(good, bad))
    text = "\n".join(lines)
    expected_lines = [ln.replace(word, repl) for ln in lines]
    expected_lines[at] = fixed
    expected = "\n".join(expected_lines)

    def rest_done(s: State) -> bool:
        got = str(s.get("text", "")).split("\n")
        return len(got) == len(lines) and all(
            g == e for i, (g, e) in enumerate(zip(got, expected_lines, strict=True)) if i != at
        )

    milestones = (
        Milestone("find/replace opened", lambda s: s.get("dialog") is True),
        Milestone("search filled in", lambda s: s.get("find") == word and s.get("replace") == repl),
        Milestone("word replaced", rest_done),
        Milestone("line corrected", lambda s: s.get("text") == expected),
        Milestone(
            "document saved", lambda s: s.get("saved") == expected and s.get("text") == expected
        ),
    )
    oracle = (
        Click("#find-open"),
        Click("#find"),
        TypeText(word),
        Click("#replace"),
        TypeText(repl),
        Click("#replace-all"),
        Click("#find"),
        Press("Control+a"),
        TypeText(bad),
        Click("#replace"),
        Press("Control+a"),
        TypeText(good),
        Click("#replace-all"),
        Click("#close-find"),
        Click("#save"),
    )
    body = (
        "<div class='card'><button id='find-open'>Find / Replace</button>"
        "<button class='primary' id='save'>Save</button> <span id='status' class='ok'></span>"
        f"</div><div class='editor'><pre id='gutter'></pre><textarea id='doc' rows='{len(lines)}'"
        " wrap='off' spellcheck='false'></textarea></div><div class='card hidden' id='fr'>"
        "<h3>Find and replace</h3><p><label for='find'>Find</label><input id='find' size='22'>"
        "</p><p><label for='replace'>Replace</label><input id='replace' size='22'></p><p><button "
        "class='primary' id='replace-all'>Replace all</button><button id='close-find'>Close"
        "</button></p><p id='fr-result'></p></div>"
    )
    instruction = (
        f"In the editor, replace every occurrence of \u201c{word}\u201d with \u201c{repl}\u201d. "
        f"Line {at + 1} has a spelling mistake: make it read exactly \u201c{fixed}\u201d. "
        "Then save the document."
    )
    return WebTask(
        family="text-editor",
        seed=seed,
        instruction=instruction,
        files={
            "index.html": page(
                "Notes", body, f"const D = {js({'text': text})};{_SCRIPT}", style=_STYLE
            )
        },
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("text-editor", "find/replace a word, correct one line by hand, and save", build)
