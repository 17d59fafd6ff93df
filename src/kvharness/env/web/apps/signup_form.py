"""Fill a sign-up form whose validation rejects the first try, then submit it."""

from __future__ import annotations

import random

from kvharness.env.web.apps._page import esc, js, page
from kvharness.env.web.task import Click, Family, Milestone, TypeText, WebTask

_FIRST = ("Ada", "Grace", "Linus", "Barbara", "Ken", "Radia", "Edsger", "Frances")
_LAST = ("Lovelace", "Hopper", "Torvalds", "Liskov", "Thompson", "Perlman", "Dijkstra", "Allen")
_PLANS = ("Free", "Team", "Business", "Enterprise")


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    user = name.split()[0].lower() + str(rng.randint(10, 99))
    email = f"{user}@example.org"
    plan = rng.choice(_PLANS)
    # The password rule varies, so a remembered password does not pass every variant.
    digits = rng.randint(2, 3)
    password = "".join(rng.choice("abcdefghjkmnpqrstuvwxyz") for _ in range(8)) + "".join(
        rng.choice("23456789") for _ in range(digits)
    )
    options = "".join(
        f"<label class='plan'><input type='radio' name='plan' value='{esc(p)}'> {esc(p)}</label>"
        for p in _PLANS
    )
    fields = [("name", "Full name"), ("email", "Email"), ("password", "Password")]
    rng.shuffle(fields)
    rows = "".join(
        f"<p><label for='{f}'>{esc(label)}</label>"
        f"<input id='{f}' type='{'password' if f == 'password' else 'text'}' size='30'></p>"
        for f, label in fields
    )
    body = (
        "<div class='card'><h3>Create your account</h3>"
        f"{rows}<p><label>Plan</label>{options}</p>"
        f"<p class='error' id='err'></p><button class='primary' id='submit'>Create account</button>"
        "</div><div class='card hidden' id='done'><h3 class='ok'>Account created</h3></div>"
    )
    script = f"""
const need = {js(digits)};
let submitted = null, attempts = 0;
function value(id) {{ return document.getElementById(id).value; }}
function plan() {{
  const c = document.querySelector("input[name=plan]:checked"); return c ? c.value : null; }}
document.getElementById('submit').addEventListener('click', () => {{
  attempts += 1;
  const err = document.getElementById('err');
  const pw = value('password');
  if (!value('name').trim() || !value('email').includes('@')) {{
    err.textContent = 'Name and a valid email are required.'; return; }}
  if (pw.length < 8 || (pw.match(/[0-9]/g) || []).length < need) {{
    err.textContent = 'Password: at least 8 characters and ' + need + ' digits.'; return; }}
  if (!plan()) {{ err.textContent = 'Choose a plan.'; return; }}
  submitted = {{name: value('name'), email: value('email'), password: pw, plan: plan()}};
  err.textContent = '';
  document.getElementById('done').classList.remove('hidden');
}});
window.kvhState = () => ({{
  name: value('name'), email: value('email'), password: value('password'),
  plan: plan(), attempts, submitted }});
"""
    instruction = (
        f"Create an account for {name} with the email {email}, the password {password} "
        f"and the {plan} plan, and submit the form."
    )
    oracle = (
        Click("#name"),
        TypeText(name),
        Click("#email"),
        TypeText(email),
        Click("#password"),
        TypeText(password),
        Click("#submit"),
        Click(f"input[name=plan][value='{plan}']"),
        Click("#submit"),
    )
    milestones = (
        Milestone("name entered", lambda s: s.get("name") == name),
        Milestone("email entered", lambda s: s.get("email") == email),
        Milestone("password entered", lambda s: s.get("password") == password),
        Milestone("plan chosen", lambda s: s.get("plan") == plan),
        Milestone(
            "submitted",
            lambda s: (
                s.get("submitted")
                == {"name": name, "email": email, "password": password, "plan": plan}
            ),
        ),
    )
    return WebTask(
        family="signup-form",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Sign up", body, script)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("signup-form", "fill a validated sign-up form and submit it", build)
