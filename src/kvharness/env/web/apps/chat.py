"""In a messaging app: open a conversation, send a message, react to one, mute another chat."""

from __future__ import annotations

import copy
import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, Press, State, TypeText, WebTask

_PEOPLE = (
    "Priya Shah", "Marco Rossi", "Hana Kim", "Leo Martin", "Amara Obi", "Finn Larsen",
    "Zoe Turner", "Ravi Menon", "Nora Weiss", "Sam Carter",
)  # fmt: skip
_GROUPS = ("Book club", "Family", "Design team", "Climbing crew", "Flat 4B")
_LINES = (
    "Are we still on for Friday?", "I pushed the new draft.", "Can you send me the slides?",
    "Lunch at noon?", "The train is delayed again.", "Happy birthday!", "Who has the keys?",
    "I found a great recipe.", "Meeting moved to 3pm.", "Thanks for yesterday!",
    "Did you see the match?", "Running ten minutes late.", "The package arrived.",
    "Let's book the cabin.", "Photos are uploaded.", "Can we reschedule?", "Good luck today!",
    "I'll bring snacks.", "Parking is free after six.", "Check your email when you can.",
)  # fmt: skip
_REPLIES = (
    "Sounds good, see you there", "On my way now", "Sure, sending it shortly",
    "Count me in", "Thanks, that helps a lot", "Let me check and get back to you",
)  # fmt: skip
_REACTIONS = ("Like", "Love", "Laugh", "Wow", "Sad")
_MARKS = {"Like": "&#10004;", "Love": "&#9829;", "Laugh": "&#9786;", "Wow": "&#9733;",
          "Sad": "&#9785;"}  # fmt: skip

_SCRIPT = """
let convs = D.convs, open = null, picker = null;
const $ = (id) => document.getElementById(id);
const conv = (id) => convs.find((c) => c.id === id);
function render() {
  $('list').innerHTML = convs.map((c) => `<div class="conv${c.id === open ? ' sel' : ''}"
    id="conv-${c.id}" data-id="${c.id}"><b>${c.name}</b>${c.muted ? ' <span class="muted">' +
    '(muted)</span>' : ''}<br><small>${c.msgs[c.msgs.length - 1].text}</small></div>`).join('');
  const c = conv(open);
  $('pane').classList.toggle('hidden', !c); $('empty').classList.toggle('hidden', !!c);
  if (!c) return;
  $('title').textContent = c.name;
  $('mute').textContent = c.muted ? 'Unmute' : 'Mute';
  $('msgs').innerHTML = c.msgs.map((m, i) => `<div class="msg${m.from === 'me' ? ' me' : ''}"
    id="msg-${i}"><small>${m.from === 'me' ? 'You' : m.from}</small><br>${m.text}
    ${m.reaction ? `<span class="rx">${D.marks[m.reaction]} ${m.reaction}</span>` : ''}
    <button class="react" data-i="${i}">React</button>${picker === i ? '<div class="picker">' +
    D.reactions.map((r) => `<button class="pick" data-r="${r}">${D.marks[r]} ${r}</button>`)
    .join('') + '</div>' : ''}</div>`).join(''); }
document.addEventListener('click', (e) => {
  const row = e.target.closest('.conv'), b = e.target.closest('button');
  if (row) { open = row.dataset.id; picker = null; $('composer').value = ''; }
  else if (!b) return;
  else if (b.classList.contains('react')) picker = picker === +b.dataset.i ? null : +b.dataset.i;
  else if (b.classList.contains('pick')) {
    const m = conv(open).msgs[picker];
    m.reaction = m.reaction === b.dataset.r ? null : b.dataset.r; picker = null; }
  else if (b.id === 'mute') conv(open).muted = !conv(open).muted;
  else if (b.id === 'send') send();
  render(); });
function send() {
  const t = $('composer').value.trim();
  if (t && open) { conv(open).msgs.push({from: 'me', text: t, reaction: null});
    $('composer').value = ''; } }
$('composer').addEventListener('keydown', (e) => {
  if (e.key === 'Enter') { e.preventDefault(); send(); render(); }
  else if (e.key === 'Escape') { picker = null; render(); } });
window.kvhState = () => ({open, draft: $('composer').value, convs: JSON.parse(JSON.stringify(
  convs))});
render();
"""

_STYLE = """
.app { display: flex; gap: 14px; height: 680px; }
#list { width: 300px; overflow: auto; padding: 0; }
.conv { padding: 10px 14px; border-bottom: 1px solid #e3e8f0; cursor: pointer; }
.conv.sel { background: #dbe7fb; } .conv small { color: #66708a; } .muted { color: #8a6d1f; }
#main { flex: 1; display: flex; flex-direction: column; }
#pane { flex: 1; display: flex; flex-direction: column; min-height: 0; }
#pane.hidden { display: none; } #msgs { flex: 1; overflow: auto; }
.msg { background: #f1f3f7; border-radius: 8px; padding: 6px 12px; margin: 6px 0; width: 70%;
  position: relative; } .msg.me { background: #dcf0e0; margin-left: 30%; }
.msg small { color: #66708a; } .rx { background: #fff; border: 1px solid #cfd6e0;
  border-radius: 10px; padding: 0 6px; font-size: 13px; }
button.react { font-size: 12px; padding: 1px 8px; float: right; }
.picker { margin-top: 4px; } .picker button { font-size: 13px; padding: 2px 8px; }
.head { display: flex; justify-content: space-between; align-items: center; }
.compose { display: flex; gap: 8px; } #composer { flex: 1; }
"""


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    names = rng.sample(_PEOPLE, 4) + rng.sample(_GROUPS, rng.randint(1, 2))
    rng.shuffle(names)
    lines = iter(rng.sample(_LINES, len(_LINES)))
    convs: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        people = [name] if name in _PEOPLE else rng.sample(_PEOPLE, 2)
        said = [
            {"from": rng.choice([*people, "me"]), "text": next(lines), "reaction": None}
            for _ in range(rng.randint(2, 3))
        ]
        convs.append({"id": f"c{i}", "name": name, "muted": rng.random() < 0.3, "msgs": said})
    target, other = rng.sample(convs, 2)
    other["muted"] = False
    theirs = [i for i, m in enumerate(target["msgs"]) if m["from"] != "me"]
    if not theirs:
        target["msgs"][0]["from"] = target["name"] if target["name"] in _PEOPLE else _PEOPLE[0]
        theirs = [0]
    at = rng.choice(theirs)
    reaction = rng.choice(_REACTIONS)
    reply = rng.choice(_REPLIES)
    quoted = target["msgs"][at]
    final = copy.deepcopy(convs)
    t_final = next(c for c in final if c["id"] == target["id"])
    t_final["msgs"][at]["reaction"] = reaction
    t_final["msgs"].append({"from": "me", "text": reply, "reaction": None})
    next(c for c in final if c["id"] == other["id"])["muted"] = True

    def msgs(s: State) -> list[Any]:
        cs = s.get("convs")
        for c in cs if isinstance(cs, list) else []:
            if isinstance(c, dict) and c.get("id") == target["id"]:
                m = c.get("msgs")
                return m if isinstance(m, list) else []
        return []

    def sent(s: State) -> bool:
        return msgs(s)[len(target["msgs"]) :][:1] == [t_final["msgs"][-1]]

    def reacted(s: State) -> bool:
        m = msgs(s)
        return (
            sent(s)
            and len(m) > at
            and isinstance(m[at], dict)
            and m[at].get("reaction") == reaction
        )

    milestones = (
        Milestone("conversation opened", lambda s: s.get("open") == target["id"]),
        Milestone("message sent", sent),
        Milestone("message reacted to", reacted),
        Milestone("other conversation muted", lambda s: s.get("convs") == final),
    )
    oracle = (
        Click(f"#conv-{target['id']}"),
        Click("#composer"),
        TypeText(reply),
        Press("Enter"),
        Click(f"#msg-{at} button.react"),
        Click(f"#msg-{at} button.pick[data-r={reaction}]"),
        Click(f"#conv-{other['id']}"),
        Click("#mute"),
    )
    body = (
        "<div class='app'><div class='card' id='list'></div><div class='card' id='main'>"
        "<p id='empty'>Select a conversation.</p><div id='pane' class='hidden'><div class='head'><h3 id='title'></h3>"
        "<button id='mute'>Mute</button></div><div id='msgs'></div><div class='compose'>"
        "<input id='composer' placeholder='Write a message, press Enter to send'>"
        "<button class='primary' id='send'>Send</button></div></div></div></div>"
    )
    who = "you" if quoted["from"] == "me" else quoted["from"]
    instruction = (
        f"Open the conversation with {target['name']} and send the message \u201c{reply}\u201d. "
        f"Then react with \u201c{reaction}\u201d to the earlier message from {who} that says "
        f"\u201c{quoted['text']}\u201d. Finally, mute the conversation with {other['name']}."
    )
    script = f"const D = {js({'convs': convs, 'reactions': _REACTIONS, 'marks': _MARKS})};"
    return WebTask(
        family="chat",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Messages", body, script + _SCRIPT, style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("chat", "send a message, react to one, and mute a chat in a messenger", build)
