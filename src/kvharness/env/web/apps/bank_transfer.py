"""Send a bank transfer: pick the account and payee, enter amount and reference, confirm by code."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import js, page
from kvharness.env.web.task import Click, Family, Milestone, State, TypeText, WebTask

_ACCOUNTS = ("Everyday Checking", "Savings", "Business", "Joint Account", "Travel Fund", "Bills")
_PAYEES = (
    "Northwind Utilities", "Maple Street Rentals", "Dr. Okafor Dental", "City Water Board",
    "Harbor Insurance", "Lina Moreau", "Tomas Berg", "Greenleaf Nursery", "Apex Telecom",
    "Ravi Kumar", "Bluebird Daycare", "Summit Gym",
)  # fmt: skip
_REFS = ("Invoice", "Rent", "Order", "Policy", "Account", "Membership")

_SCRIPT = """
const balances = Object.fromEntries(D.accounts.map((a) => [a.id, a.cents]));
let from = null, payee = null, modal = false, done = [], error = '';
const $ = (id) => document.getElementById(id);
const fmt = (c) => '$' + (c / 100).toFixed(2).replace(/\\B(?=(\\d{3})+(?!\\d))/g, ',');
function cents() {
  const t = $('amount').value.trim().replace(/^\\$/, '');
  return /^\\d+(\\.\\d{1,2})?$/.test(t) ? Math.round(parseFloat(t) * 100) : null; }
function render() {
  $('accounts').innerHTML = D.accounts.map((a) => `<label class="acct"><input type="radio"
    name="from" value="${a.id}"${from === a.id ? ' checked' : ''}> ${a.name} ••••${a.last}
    <b>${fmt(balances[a.id])}</b></label>`).join('');
  $('payees').innerHTML = D.payees.map((p) => `<button class="payee${payee === p.id ? ' sel' : ''}"
    data-id="${p.id}">${p.name}</button>`).join('');
  $('err').textContent = modal ? '' : error;
  $('modal').classList.toggle('hidden', !modal);
  $('history').innerHTML = done.map((t) => `<li>${fmt(t.cents)} to
    ${D.payees.find((p) => p.id === t.payee).name}, ref ${t.ref}</li>`).join(''); }
document.addEventListener('change', (e) => { if (e.target.name === 'from') from = e.target.value; });
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'); if (!b) return;
  if (b.classList.contains('payee')) { payee = b.dataset.id; render(); }
  else if (b.id === 'review') {
    const c = cents();
    if (!from || !payee) error = 'Choose an account and a payee.';
    else if (!c) error = 'Enter a valid amount.';
    else if (c > balances[from]) error = 'Insufficient funds in this account.';
    else if (!$('ref').value.trim()) error = 'Enter a reference.';
    else {
      error = ''; modal = true; $('code').value = ''; $('code-err').textContent = '';
      $('summary').textContent = `${fmt(c)} from ${D.accounts.find((a) => a.id === from).name}
        to ${D.payees.find((p) => p.id === payee).name}, reference "${$('ref').value.trim()}".`; }
    render(); }
  else if (b.id === 'cancel') { modal = false; render(); }
  else if (b.id === 'confirm') {
    if ($('code').value.trim().toUpperCase() !== D.code) {
      $('code-err').textContent = 'The code does not match.'; return; }
    const c = cents();
    balances[from] -= c;
    done.push({from, payee, cents: c, ref: $('ref').value.trim()});
    modal = false; $('amount').value = ''; $('ref').value = ''; payee = null;
    $('msg').textContent = 'Transfer sent.'; render(); } });
window.kvhState = () => ({
  from, payee, amountCents: cents(), ref: $('ref').value.trim(), modal,
  code: $('code').value, balances: Object.assign({}, balances), transfers: done.slice() });
render();
"""

_STYLE = """
.modal.hidden { display: none; }
label.acct { display: block; padding: 6px 0; } label.acct b { float: right; margin-left: 30px; }
button.payee { min-width: 190px; text-align: left; } button.payee.sel { background: #cfe0fb;
  border-color: #2f6fdb; font-weight: bold; }
.cols { display: flex; gap: 14px; } .cols > .card { flex: 1; }
"""


def _dict(s: State, key: str) -> dict[str, Any]:
    v = s.get(key)
    return v if isinstance(v, dict) else {}


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    names = rng.sample(_ACCOUNTS, rng.randint(3, 4))
    lasts = rng.sample(range(1000, 9999), len(names))
    accounts: list[dict[str, Any]] = [
        {"id": f"a{i}", "name": n, "last": str(lasts[i]), "cents": rng.randint(300, 9000) * 100}
        for i, n in enumerate(names)
    ]
    payees = [{"id": f"p{i}", "name": n} for i, n in enumerate(rng.sample(_PAYEES, 6))]
    src = rng.choice(accounts)
    dst = rng.choice(payees)
    amount = rng.randint(2000, min(src["cents"] - 100, 150000))
    if rng.random() < 0.5:
        amount -= amount % 100
    amount_text = f"{amount // 100}.{amount % 100:02d}" if amount % 100 else str(amount // 100)
    ref = f"{rng.choice(_REFS)} {rng.randint(1000, 99999)}"
    code = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2))
    code += "-" + "".join(rng.choice("0123456789") for _ in range(4))
    balances = {a["id"]: a["cents"] for a in accounts}
    balances[src["id"]] -= amount
    expected = [{"from": src["id"], "payee": dst["id"], "cents": amount, "ref": ref}]

    def chosen(s: State) -> bool:
        return s.get("from") == src["id"] and s.get("payee") == dst["id"]

    def entered(s: State) -> bool:
        return chosen(s) and s.get("amountCents") == amount and s.get("ref") == ref

    milestones = (
        Milestone("source account chosen", lambda s: s.get("from") == src["id"]),
        Milestone("payee chosen", chosen),
        Milestone("amount and reference entered", entered),
        Milestone("review opened", lambda s: s.get("modal") is True and entered(s)),
        Milestone(
            "transfer confirmed",
            lambda s: s.get("transfers") == expected and _dict(s, "balances") == balances,
        ),
    )
    oracle = (
        Click(f"input[name=from][value={src['id']}]"),
        Click(f"button.payee[data-id={dst['id']}]"),
        Click("#amount"),
        TypeText(amount_text),
        Click("#ref"),
        TypeText(ref),
        Click("#review"),
        Click("#code"),
        TypeText(code),
        Click("#confirm"),
    )
    body = (
        "<div class='cols'><div class='card'><h3>From account</h3><div id='accounts'></div></div>"
        "<div class='card'><h3>Pay to</h3><div id='payees'></div></div></div>"
        "<div class='card'><h3>Details</h3>"
        "<p><label for='amount'>Amount ($)</label><input id='amount' size='12'></p>"
        "<p><label for='ref'>Reference</label><input id='ref' size='30'></p>"
        "<p class='error' id='err'></p><button class='primary' id='review'>Review transfer</button>"
        " <span class='ok' id='msg'></span><ul id='history'></ul></div>"
        "<div class='modal hidden' id='modal'><div class='card'><h3>Confirm transfer</h3>"
        "<p id='summary'></p>"
        f"<p>To authorise, type the security code <b id='show-code'>{code}</b> below.</p>"
        "<p><label for='code'>Security code</label><input id='code' size='12'></p>"
        "<p class='error' id='code-err'></p><button class='primary' id='confirm'>Confirm</button>"
        "<button id='cancel'>Cancel</button></div></div>"
    )
    instruction = (
        f"Transfer ${amount_text} from your {src['name']} account (ending {src['last']}) to "
        f"{dst['name']} with the reference \u201c{ref}\u201d. Review the transfer, then confirm "
        "it by typing the security code shown in the confirmation dialog."
    )
    script = f"const D = {js({'accounts': accounts, 'payees': payees, 'code': code})};{_SCRIPT}"
    return WebTask(
        family="bank-transfer",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Online Banking", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=oracle,
    )


FAMILY = Family("bank-transfer", "send a bank transfer confirmed by a code in a modal", build)
