"""A one-page checkout: fix the cart, enter an address, choose shipping and payment, order."""

from __future__ import annotations

import random
from typing import Any

from kvharness.env.web.apps._page import esc, js, page
from kvharness.env.web.task import Click, Family, Milestone, OracleStep, State, TypeText, WebTask

_ITEMS = (
    ("Blue mug", 1250), ("Desk lamp", 3499), ("Notebook A5", 675), ("USB-C cable", 999),
    ("Water bottle", 1800), ("Wireless mouse", 2499), ("Plant pot", 1150), ("Phone stand", 1399),
    ("Headphones", 5999), ("Tea sampler", 1575),
)  # fmt: skip
_FIRST = ("Maria", "Jonas", "Aiko", "Samir", "Elena", "Tom\u00e1s", "Priya", "Olu")
_LAST = ("Berg", "Novak", "Tanaka", "Haddad", "Rossi", "Silva", "Iyer", "Adeyemi")
_STREETS = ("Harbor Road", "Linden Street", "Maple Avenue", "Station Lane", "Mill Way")
_CITIES = ("Springfield", "Riverton", "Lakeside", "Fairview", "Oakdale", "Brookfield")
_SHIPS = (("standard", "Standard (5\u20137 days)"), ("express", "Express (2 days)"),
          ("overnight", "Overnight"))  # fmt: skip
_FIELDS = (("name", "Full name"), ("street", "Street"), ("city", "City"), ("zip", "Postcode"))
_STAGES = ("cart", "address", "shipping", "payment", "review", "done")

_SCRIPT = """
let stage = 'cart', ship = null, pay = null, order = null, error = '';
const cart = Object.assign({}, D.cart), done = {}, $ = (id) => document.getElementById(id);
const money = (c) => '$' + (c / 100).toFixed(2);
const item = (id) => D.items.find((i) => i.id === id);
const address = () => Object.fromEntries(D.fields.map(([k]) => [k, $('a-' + k).value]));
const payment = () => pay && {method: pay, ref: $('p-ref').value};
const shipping = () => D.ships.find((s) => s.id === done.ship) || {price: 0};
const shipCost = () => shipping().price;
const subtotal = () => Object.entries(cart).reduce((t, [id, q]) => t + item(id).price * q, 0);
function render() {
  STAGES.forEach((s) => { $('v-' + s).classList.toggle('hidden', s !== stage);
    $('st-' + s).classList.toggle('cur', s === stage); });
  $('err').textContent = error;
  $('lines').innerHTML = Object.entries(cart).map(([id, q]) => `<tr><td>${item(id).name}</td>
    <td>${money(item(id).price)}</td><td><button class="dec" data-id="${id}">\\u2212</button>
    <span class="qty">${q}</span><button class="inc" data-id="${id}">+</button></td>
    <td>${money(item(id).price * q)}</td><td><button class="rm" data-id="${id}">Remove</button>
    </td></tr>`).join('');
  $('subtotal').textContent = 'Subtotal: ' + money(subtotal());
  $('ref-row').classList.toggle('hidden', !pay);
  $('ref-label').textContent = pay === 'card' ? 'Card number' : 'PO number';
  if (stage === 'review') $('summary').innerHTML = Object.entries(cart).map(([id, q]) =>
    `<p>${q} \\u00d7 ${item(id).name}: ${money(item(id).price * q)}</p>`).join('') +
    `<p>Ship to: ${['name', 'street', 'city', 'zip'].map((k) => done.address[k]).join(', ')}</p>
    <p>Shipping: ${shipping().label}
    (${money(shipCost())})</p><p>Payment: ${done.pay.method} ${done.pay.ref}</p>
    <p><b>Total: ${money(subtotal() + shipCost())}</b></p>`; }
function next() {
  const a = address(), p = payment();
  if (stage === 'cart' && !Object.keys(cart).length) error = 'Your cart is empty.';
  else if (stage === 'address' && (Object.values(a).some((v) => !v.trim()) ||
    !/^\\d{5}$/.test(a.zip.trim()))) error = 'Fill in every field (postcode: 5 digits).';
  else if (stage === 'shipping' && !ship) error = 'Choose a shipping method.';
  else if (stage === 'payment' && !(p && (p.method === 'card' ?
    /^\\d{16}$/.test(p.ref.replace(/ /g, '')) : /^PO-\\d{5}$/i.test(p.ref.trim()))))
    error = 'Choose a payment method and enter a valid number.';
  else {
    error = '';
    done[stage === 'shipping' ? 'ship' : stage === 'payment' ? 'pay' : stage] =
      stage === 'cart' ? Object.assign({}, cart) : stage === 'address' ? a :
      stage === 'shipping' ? ship : p;
    stage = STAGES[STAGES.indexOf(stage) + 1]; }
  render(); }
document.addEventListener('click', (e) => {
  const b = e.target.closest('button'); if (!b) return;
  const id = b.dataset.id;
  if (b.classList.contains('inc')) cart[id] += 1;
  else if (b.classList.contains('dec') && cart[id] > 1) cart[id] -= 1;
  else if (b.classList.contains('rm')) delete cart[id];
  else if (b.classList.contains('next')) return next();
  else if (b.classList.contains('back')) {
    stage = STAGES[STAGES.indexOf(stage) - 1]; error = ''; }
  else if (b.id === 'place' && stage === 'review') { stage = 'done';
    order = {cart: Object.assign({}, cart), address: done.address, ship: done.ship, pay: done.pay,
             total: subtotal() + shipCost()}; }
  render(); });
document.addEventListener('change', (e) => {
  if (e.target.name === 'ship') ship = e.target.value;
  if (e.target.name === 'pay') { pay = e.target.value; render(); } });
render();
window.kvhState = () => ({stage, cart, address: address(), ship, pay: payment(), done, order});
"""

_STYLE = """
.steps span { padding: 4px 12px; margin-right: 6px; border-radius: 12px; background: #dde3ec; }
.steps span.cur { background: #2f6fdb; color: #fff; } .qty { display: inline-block; width: 28px;
  text-align: center; } .opt { display: block; margin: 6px 0; min-width: 320px; }
"""


def _section(stage: str, title: str, inner: str, back: bool = True, forward: str = "") -> str:
    nav = "<button class='back'>Back</button>" if back else ""
    if forward:
        nav += f"<button class='primary next' id='next-{stage}'>{forward}</button>"
    return f"<div class='card hidden' id='v-{stage}'><h3>{title}</h3>{inner}<p>{nav}</p></div>"


def build(seed: int) -> WebTask:
    rng = random.Random(seed)
    chosen = rng.sample(_ITEMS, rng.randint(3, 4))
    items: list[dict[str, Any]] = [
        {"id": f"i{k}", "name": n, "price": p} for k, (n, p) in enumerate(chosen)
    ]
    cart = {i["id"]: rng.randint(1, 3) for i in items}
    change, remove = rng.sample(items, 2)
    qty = rng.choice([q for q in range(1, 6) if q != cart[change["id"]]])
    want_cart = {k: (qty if k == change["id"] else v) for k, v in cart.items() if k != remove["id"]}
    addr = {"name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
            "street": f"{rng.randint(2, 240)} {rng.choice(_STREETS)}",
            "city": rng.choice(_CITIES), "zip": f"{rng.randint(10000, 99999)}"}  # fmt: skip
    ships: list[dict[str, Any]] = [
        {"id": k, "label": lab, "price": rng.randint(3, 9) * 100 * (i + 1) + 99}
        for i, (k, lab) in enumerate(_SHIPS)
    ]
    ship = rng.choice(ships)
    method = rng.choice(("card", "invoice"))
    if method == "card":
        ref = "4" + "".join(str(rng.randint(0, 9)) for _ in range(15))
        shown_ref = " ".join(ref[i : i + 4] for i in range(0, 16, 4))
        pay_text = "credit card with the card number"
    else:
        ref = shown_ref = f"PO-{rng.randint(10000, 99999)}"
        pay_text = "invoice with the PO number"
    total = sum(p["price"] * want_cart[p["id"]] for p in items if p["id"] in want_cart)
    total += ship["price"]
    fields = list(_FIELDS)
    rng.shuffle(fields)

    def addr_ok(a: Any) -> bool:
        return isinstance(a, dict) and all(str(a.get(k, "")).strip() == v for k, v in addr.items())

    def pay_ok(p: Any) -> bool:
        got = str(p.get("ref", "")).replace(" ", "").upper() if isinstance(p, dict) else None
        return isinstance(p, dict) and p.get("method") == method and got == ref.upper()

    def done(s: State) -> dict[str, Any]:
        d = s.get("done")
        return d if isinstance(d, dict) else {}

    def placed(s: State) -> bool:
        o = s.get("order")
        if not isinstance(o, dict) or o.get("cart") != want_cart or o.get("ship") != ship["id"]:
            return False
        return addr_ok(o.get("address")) and pay_ok(o.get("pay")) and o.get("total") == total

    milestones = (
        Milestone("cart updated", lambda s: s.get("cart") == want_cart),
        Milestone("address entered", lambda s: addr_ok(done(s).get("address"))),
        Milestone("shipping chosen", lambda s: done(s).get("ship") == ship["id"]),
        Milestone("payment entered", lambda s: pay_ok(done(s).get("pay"))),
        Milestone("review reached", lambda s: s.get("stage") in ("review", "done")),
        Milestone("order placed", placed),
    )
    step = "inc" if qty > cart[change["id"]] else "dec"
    oracle: list[OracleStep] = [Click(f"button.{step}[data-id='{change['id']}']")] * abs(
        qty - cart[change["id"]]
    )
    oracle += [Click(f"button.rm[data-id='{remove['id']}']"), Click("#next-cart")]
    for k, _ in fields:
        oracle += [Click(f"#a-{k}"), TypeText(addr[k])]
    oracle += [Click("#next-address"), Click(f"input[name=ship][value={ship['id']}]")]
    oracle += [Click("#next-shipping"), Click(f"input[name=pay][value={method}]")]
    oracle += [Click("#p-ref"), TypeText(shown_ref), Click("#next-payment"), Click("#place")]
    ship_opts = "".join(
        f"<label class='opt'><input type='radio' name='ship' value='{s['id']}'> {esc(s['label'])}"
        f" \u2014 ${s['price'] / 100:.2f}</label>"
        for s in ships
    )
    inputs = "".join(f"<p><label for='a-{k}'>{lab}</label><input id='a-{k}' size='30'></p>"
                     for k, lab in fields)  # fmt: skip
    steps = "".join(f"<span id='st-{s}'>{s.title()}</span>" for s in _STAGES)
    body = (
        f"<div class='card steps'>{steps}</div><p class='error' id='err'></p>"
        + _section("cart", "Your cart", "<table><tbody id='lines'></tbody></table>"
                   "<p id='subtotal'></p>", back=False, forward="Continue to address")
        + _section("address", "Delivery address", inputs, forward="Continue to shipping")
        + _section("shipping", "Shipping method", ship_opts, forward="Continue to payment")
        + _section("payment", "Payment", "<label class='opt'><input type='radio' name='pay' "
                   "value='card'> Credit card</label><label class='opt'><input type='radio' "
                   "name='pay' value='invoice'> Invoice</label><p id='ref-row'><label id="
                   "'ref-label' for='p-ref'></label><input id='p-ref' size='24'></p>",
                   forward="Continue to review")
        + _section("review", "Review your order", "<div id='summary'></div><button "
                   "class='primary' id='place'>Place order</button>")
        + _section("done", "Order placed", "<p class='ok'>Thank you for your order.</p>", False)
    )  # fmt: skip
    instruction = (
        f"Check out: in the cart, change the quantity of {change['name']} to {qty} and remove "
        f"{remove['name']}. Deliver to {addr['name']}, {addr['street']}, {addr['city']}, "
        f"postcode {addr['zip']}. Choose {ship['label']} shipping, pay by {pay_text} {shown_ref}, "
        "then place the order on the review page."
    )
    data = {"items": items, "cart": cart, "ships": ships, "fields": fields}
    script = f"const D = {js(data)}, STAGES = {js(list(_STAGES))};{_SCRIPT}"
    return WebTask(
        family="checkout",
        seed=seed,
        instruction=instruction,
        files={"index.html": page("Shop checkout", body, script, style=_STYLE)},
        milestones=milestones,
        oracle=tuple(oracle),
    )


FAMILY = Family("checkout", "go through a multi-stage checkout and place the order", build)
