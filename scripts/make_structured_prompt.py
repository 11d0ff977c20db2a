#!/usr/bin/env python3
"""make_structured_prompt.py — writes bench/prompts/structured.txt, the structured prompt set of the speculative
decoding A/B (docs/ab.md "Speculative decoding: serial against --draft").

Why generated: the set must look like the output an assistant writes when it repeats its context — SQL over a
schema it was just shown, JSON records with the same keys, a code file rewritten with small edits — and it must be
long enough for a sweep of frontiers, each frontier cutting the text at another place (so each frontier continues
another part: an INSERT row, a JSON record, the middle of an edited function). Writing ~10 KB of that by hand would
only be slower; a seeded generator is reproducible and reviewable. Standard library only, deterministic (seed 7):
re-running it rewrites the committed file byte for byte.

Usage: python3 scripts/make_structured_prompt.py [OUT]   (default bench/prompts/structured.txt)
"""

import json
import os
import random
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FIRST = ["Ada", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kofi", "Lena",
         "Marta", "Nils", "Olga", "Pavel", "Rosa", "Sami", "Tomas", "Ulla", "Vera", "Wim", "Yara", "Zoltan"]
LAST = ["Andersen", "Bianchi", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanova", "Jensen",
        "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Schmidt", "Tanaka"]
CITIES = ["Lisbon", "Oslo", "Krakow", "Lyon", "Turin", "Gdansk", "Bergen", "Porto", "Graz", "Tartu", "Aarhus"]
PRODUCTS = [("keyboard", 49.90), ("monitor", 189.00), ("headset", 79.50), ("webcam", 64.00), ("dock", 129.99),
            ("mouse", 24.90), ("cable", 9.99), ("laptop stand", 39.00), ("microphone", 99.00), ("lamp", 34.50)]
STATUSES = ["pending", "paid", "shipped", "delivered", "refunded"]


def sql_section(r):
    out = ["-- Task: the schema of a small shop database, its seed data, and the reports the team asked for.",
           "", "CREATE TABLE customers (", "    customer_id   INTEGER PRIMARY KEY,",
           "    first_name    TEXT NOT NULL,", "    last_name     TEXT NOT NULL,", "    email         TEXT UNIQUE NOT NULL,",
           "    city          TEXT NOT NULL,", "    created_at    DATE NOT NULL", ");", "",
           "CREATE TABLE orders (", "    order_id      INTEGER PRIMARY KEY,",
           "    customer_id   INTEGER NOT NULL REFERENCES customers(customer_id),",
           "    product       TEXT NOT NULL,", "    quantity      INTEGER NOT NULL CHECK (quantity > 0),",
           "    unit_price    NUMERIC(10, 2) NOT NULL,", "    status        TEXT NOT NULL DEFAULT 'pending',",
           "    ordered_at    DATE NOT NULL", ");", "", "CREATE INDEX orders_by_customer ON orders (customer_id);",
           "CREATE INDEX orders_by_status ON orders (status, ordered_at);", ""]
    customers = []
    for cid in range(1, 11):
        f, l = r.choice(FIRST), r.choice(LAST)
        customers.append((cid, f, l, r.choice(CITIES)))
        out.append("INSERT INTO customers (customer_id, first_name, last_name, email, city, created_at) VALUES "
                   "(%d, '%s', '%s', '%s.%s@example.org', '%s', '2025-%02d-%02d');"
                   % (cid, f, l, f.lower(), l.lower(), customers[-1][3], r.randint(1, 12), r.randint(1, 28)))
    out.append("")
    for oid in range(1001, 1019):
        p, price = r.choice(PRODUCTS)
        out.append("INSERT INTO orders (order_id, customer_id, product, quantity, unit_price, status, ordered_at) "
                   "VALUES (%d, %d, '%s', %d, %.2f, '%s', '2026-%02d-%02d');"
                   % (oid, r.randint(1, 10), p, r.randint(1, 5), price, r.choice(STATUSES), r.randint(1, 11),
                      r.randint(1, 28)))
    out += ["", "-- Report 1: revenue per city for paid, shipped and delivered orders, largest first.",
            "SELECT c.city,", "       COUNT(o.order_id) AS orders,",
            "       SUM(o.quantity * o.unit_price) AS revenue", "FROM orders o",
            "JOIN customers c ON c.customer_id = o.customer_id",
            "WHERE o.status IN ('paid', 'shipped', 'delivered')", "GROUP BY c.city", "ORDER BY revenue DESC;", ""]
    for p, _ in PRODUCTS[:3]:
        out += ["-- Report: customers who ordered a %s, with their total spend on it." % p,
                "SELECT c.customer_id, c.first_name, c.last_name, c.email,",
                "       SUM(o.quantity * o.unit_price) AS spent", "FROM customers c",
                "JOIN orders o ON o.customer_id = c.customer_id",
                "WHERE o.product = '%s' AND o.status <> 'refunded'" % p,
                "GROUP BY c.customer_id, c.first_name, c.last_name, c.email", "ORDER BY spent DESC;", ""]
    return out


def json_section(r):
    out = ["", "Task: the same orders as the JSON the API returns for GET /v1/orders?status=shipped (page 1).", ""]
    items = []
    for oid in range(2001, 2006):
        p, price = r.choice(PRODUCTS)
        q = r.randint(1, 4)
        f, l = r.choice(FIRST), r.choice(LAST)
        items.append({
            "order_id": oid,
            "customer": {"id": r.randint(1, 10), "name": "%s %s" % (f, l), "email": "%s.%s@example.org" % (f.lower(), l.lower()),
                         "city": r.choice(CITIES)},
            "items": [{"product": p, "quantity": q, "unit_price": price, "line_total": round(q * price, 2)}],
            "status": "shipped",
            "shipping": {"carrier": r.choice(["DHL", "UPS", "PostNord", "GLS"]),
                         "tracking": "TRK%08d" % r.randint(0, 10**8 - 1), "estimated_days": r.randint(1, 6)},
            "ordered_at": "2026-%02d-%02dT%02d:%02d:00Z" % (r.randint(1, 11), r.randint(1, 28), r.randint(0, 23),
                                                           r.randint(0, 59)),
        })
    doc = {"page": 1, "per_page": len(items), "total": 23, "data": items}
    out += json.dumps(doc, indent=2).splitlines()
    return out


CODE = '''def parse_record(line, sep=","):
    """Split one CSV line into a dict of the known columns; None for a blank line."""
    line = line.strip()
    if not line:
        return None
    fields = line.split(sep)
    if len(fields) != len(COLUMNS):
        raise ValueError("expected %d fields, got %d" % (len(COLUMNS), len(fields)))
    record = dict(zip(COLUMNS, fields))
    record["quantity"] = int(record["quantity"])
    record["unit_price"] = float(record["unit_price"])
    return record


def load_orders(path, sep=","):
    """Read every order of a CSV file, skipping the header and blank lines."""
    orders = []
    with open(path) as f:
        next(f)
        for number, line in enumerate(f, start=2):
            try:
                record = parse_record(line, sep)
            except ValueError as e:
                raise ValueError("%s:%d: %s" % (path, number, e))
            if record is not None:
                orders.append(record)
    return orders


def revenue_by_city(orders, customers):
    """Sum quantity * unit_price per city over the orders that were not refunded."""
    totals = {}
    for order in orders:
        if order["status"] == "refunded":
            continue
        city = customers[order["customer_id"]]["city"]
        totals[city] = totals.get(city, 0.0) + order["quantity"] * order["unit_price"]
    return dict(sorted(totals.items(), key=lambda kv: kv[1], reverse=True))


def top_customers(orders, customers, n=5):
    """The n customers with the largest spend, as (name, spend) pairs."""
    spend = {}
    for order in orders:
        if order["status"] == "refunded":
            continue
        spend[order["customer_id"]] = spend.get(order["customer_id"], 0.0) + order["quantity"] * order["unit_price"]
    ranked = sorted(spend.items(), key=lambda kv: kv[1], reverse=True)[:n]
    return [(customers[cid]["name"], total) for cid, total in ranked]
'''

# The edit the task asks for: Decimal money, a shared line_total helper, a status filter argument.
EDITS = [
    ('record["unit_price"] = float(record["unit_price"])', 'record["unit_price"] = Decimal(record["unit_price"])'),
    ('def revenue_by_city(orders, customers):', 'def line_total(order):\n    """quantity * unit_price of one order, exact."""\n'
     '    return order["quantity"] * order["unit_price"]\n\n\ndef revenue_by_city(orders, customers, skip=("refunded",)):'),
    ('        if order["status"] == "refunded":\n            continue\n        city',
     '        if order["status"] in skip:\n            continue\n        city'),
    ('totals.get(city, 0.0) + order["quantity"] * order["unit_price"]', 'totals.get(city, Decimal(0)) + line_total(order)'),
    ('def top_customers(orders, customers, n=5):', 'def top_customers(orders, customers, n=5, skip=("refunded",)):'),
    ('        if order["status"] == "refunded":\n            continue\n        spend',
     '        if order["status"] in skip:\n            continue\n        spend'),
    ('spend.get(order["customer_id"], 0.0) + order["quantity"] * order["unit_price"]',
     'spend.get(order["customer_id"], Decimal(0)) + line_total(order)'),
]


def code_section():
    edited = CODE
    for a, b in EDITS:
        assert a in edited, a
        edited = edited.replace(a, b)
    out = ["", "Task: here is orders.py. Switch money to decimal.Decimal, add a line_total helper used by both",
           "reports, and let both reports take the statuses to skip. Reply with the whole file.", "", "orders.py:", "```python"]
    out += ["from decimal import Decimal", "", 'COLUMNS = ["order_id", "customer_id", "product", "quantity", '
            '"unit_price", "status", "ordered_at"]', "", ""] + CODE.rstrip("\n").splitlines()
    out += ["```", "", "Here is the updated orders.py:", "", "```python", "from decimal import Decimal", "",
            'COLUMNS = ["order_id", "customer_id", "product", "quantity", "unit_price", "status", "ordered_at"]', "", ""]
    out += edited.rstrip("\n").splitlines() + ["```", ""]
    return out


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench", "prompts", "structured.txt")
    r = random.Random(7)
    lines = sql_section(r) + json_section(r) + code_section()
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
