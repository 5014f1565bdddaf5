#!/usr/bin/env python3
"""gen_problems.py -- deterministic generator of GSM8K-style arithmetic word problems.

What it is: the corpus of spex's default models (issue 5). Each problem is a short story with
1-4 computations (inventory changes, shopping with change, rates over time, comparisons
between people), a question, a step-by-step reasoning in which every line shows one
computation ("Tom has 3 boxes with 12 pens each, so 3 * 12 = 36 pens.") and a final line
"The answer is N.". Every intermediate and final number is a non-negative integer below 1000
and every division is exact, so a small model can learn the arithmetic. Names, objects, verbs,
units, the sentence templates, the question and the reasoning lines are drawn from several
paraphrases each; about 30% of the problems carry one of a few fixed system messages.

Each problem is rendered in the Qwen3 ChatML template exactly as spex renders it
(src/tok/chat.c, SPEX_CHAT_CHATML_QWEN3, enable_thinking on, add_generation_prompt):
    prompt = ["<|im_start|>system\\n{system}<|im_end|>\\n"]
             "<|im_start|>user\\n{user}<|im_end|>\\n<|im_start|>assistant\\n"
    text   = prompt + "<think>\\n{reasoning}\\n</think>\\n\\n{answer}<|im_end|>"
One JSON object per line: system (str or null), user, reasoning, answer, prompt, text, steps.

Determinism and splits: problem i of a file generated with --seed S draws from its own
random.Random(S * 10**7 + i), so a file is a pure function of (S, N) and files generated with
different seeds draw from disjoint seed ranges (N < 10**7). By convention the train split uses
seed 1, the held-out split seed 2 and the demo set seed 3; --exclude FILE also drops any
problem whose user text occurs in FILE (used to keep held-out questions out of train).
--demo writes the 8 fixed demo problems (steps 1, 2, 3, 4, 1, 2, 3, 4).

What it is not: a faithful copy of GSM8K (no multi-entity algebra, no fractions, no percents).

Usage:
    gen_problems.py --split train --n 40000 --seed 1 --out train.jsonl [--exclude heldout.jsonl]
    gen_problems.py --split heldout --n 500 --seed 2 --out heldout.jsonl
    gen_problems.py --demo --out demo.jsonl
"""

import argparse
import json
import random
import sys

LIMIT = 1000          # every number shown is < LIMIT
SEED_STRIDE = 10**7   # problem i of seed S uses seed S * SEED_STRIDE + i
DEMO_SEED = 3

SYSTEMS = [
    "You are a helpful assistant.",
    "You are a careful math tutor. Think step by step.",
    "Solve the word problem and give the final answer.",
    "You are a helpful assistant that solves math word problems.",
]
SYSTEM_RATE = 0.3

# (name, subject pronoun, object pronoun, possessive)
HE = ("he", "him", "his")
SHE = ("she", "her", "her")
NAMES = [(n, HE) for n in ["Tom", "Ben", "Sam", "Leo", "Max", "Jack", "Omar", "Ravi", "Carlos", "Hugo", "Ivan",
                           "Noah", "Liam", "Ethan", "Kenji", "Mateo", "Felix", "Oscar", "David", "Paul",
                           "Diego", "Arjun", "Marcus", "Simon", "Jamal", "Peter", "Lucas", "Tariq", "Henry", "Aaron"]] + \
        [(n, SHE) for n in ["Mia", "Anna", "Emma", "Lily", "Sara", "Nina", "Zoe", "Aisha", "Maria", "Julia", "Elena",
                            "Grace", "Chloe", "Priya", "Yuki", "Olivia", "Rosa", "Hannah", "Lucy", "Ella",
                            "Fatima", "Sofia", "Amara", "Ingrid", "Leila", "Beth", "Clara", "Mei", "Tara", "Irene"]]

# objects: (singular, plural, container plural)
OBJECTS = [
    ("pen", "pens", "boxes"), ("pencil", "pencils", "packs"), ("apple", "apples", "baskets"),
    ("orange", "oranges", "bags"), ("marble", "marbles", "jars"), ("sticker", "stickers", "sheets"),
    ("cookie", "cookies", "trays"), ("card", "cards", "decks"), ("book", "books", "shelves"),
    ("egg", "eggs", "cartons"), ("shell", "shells", "buckets"), ("candy", "candies", "bags"),
    ("stamp", "stamps", "albums"), ("bead", "beads", "strings"), ("balloon", "balloons", "packs"),
    ("cupcake", "cupcakes", "boxes"), ("flower", "flowers", "pots"), ("toy car", "toy cars", "boxes"),
    ("muffin", "muffins", "trays"), ("bottle", "bottles", "crates"), ("rock", "rocks", "bags"),
    ("coin", "coins", "jars"), ("button", "buttons", "cans"), ("crayon", "crayons", "boxes"),
    ("peach", "peaches", "crates"), ("lemon", "lemons", "sacks"), ("ribbon", "ribbons", "rolls"),
    ("photo", "photos", "folders"), ("potato", "potatoes", "sacks"), ("brick", "bricks", "piles"),
    ("carrot", "carrots", "bunches"), ("candle", "candles", "packets"), ("comic", "comics", "stacks"),
    ("seed", "seeds", "packets"), ("tomato", "tomatoes", "boxes"), ("puzzle piece", "puzzle pieces", "boxes"),
]
ADD_VERBS = [("buys", "bought"), ("finds", "found"), ("gets", "got"), ("collects", "collected"),
             ("wins", "won"), ("picks up", "picked up"),
             ("receives", "received"), ("makes", "made")]
SUB_VERBS = [("gives away", "gave away"), ("loses", "lost"), ("sells", "sold"), ("uses", "used"),
             ("breaks", "broke"), ("trades away", "traded away"),
             ("donates", "donated"), ("eats", "ate")]
# shop items: (singular, plural, price range)
ITEMS = [("notebook", "notebooks", (2, 9)), ("sandwich", "sandwiches", (3, 12)), ("ticket", "tickets", (5, 30)),
         ("shirt", "shirts", (8, 40)), ("toy", "toys", (3, 25)), ("plant", "plants", (4, 20)),
         ("cake", "cakes", (6, 30)), ("ball", "balls", (2, 15)), ("lamp", "lamps", (10, 45)),
         ("hat", "hats", (5, 25)), ("puzzle", "puzzles", (4, 18)), ("mug", "mugs", (3, 14)),
         ("backpack", "backpacks", (12, 45)), ("scarf", "scarves", (6, 20)), ("kite", "kites", (4, 16)),
         ("pizza", "pizzas", (7, 18)), ("game", "games", (10, 50)), ("pillow", "pillows", (5, 22))]
# rates: (verb 3rd person, unit plural, period singular, period plural, rate range)
RATES = [("reads", "pages", "day", "days", (5, 40)), ("runs", "miles", "week", "weeks", (3, 25)),
         ("bakes", "loaves", "day", "days", (4, 30)), ("writes", "lines", "hour", "hours", (10, 60)),
         ("saves", "dollars", "week", "weeks", (5, 50)), ("walks", "kilometers", "day", "days", (2, 12)),
         ("folds", "paper cranes", "hour", "hours", (6, 30)), ("drinks", "glasses of water", "day", "days", (4, 9)),
         ("paints", "pictures", "month", "months", (2, 15)), ("plants", "trees", "day", "days", (3, 20)),
         ("sews", "buttons", "hour", "hours", (8, 40)), ("fixes", "bikes", "week", "weeks", (2, 12)),
         ("knits", "scarves", "month", "months", (2, 9)), ("swims", "laps", "day", "days", (4, 30)),
         ("earns", "dollars", "day", "days", (10, 90)), ("builds", "birdhouses", "week", "weeks", (2, 8))]

USER_PREFIXES = ["", "", "", "", "Question: ", "Solve this problem: ", "Please help me with this: "]


class Reject(Exception):
    """A draw broke a bound (a result >= LIMIT, a negative count); the caller redraws."""


def ok(x):
    if x < 0 or x >= LIMIT:
        raise Reject()
    return x


def cap(s):
    return s[0].upper() + s[1:]


def other_person(rng, name):
    while True:
        p = rng.choice(NAMES)
        if p[0] != name:
            return p


# --------------------------------------------------------------------------------------------
# Families. Each returns (story sentences, question, reasoning lines, answer) with exactly
# `steps` computations in the reasoning.
# --------------------------------------------------------------------------------------------

def fam_inventory(rng, steps):
    name, (he, him, his) = rng.choice(NAMES)
    sing, plur, cont = rng.choice(OBJECTS)
    story, reason = [], []
    left = steps
    # start: given directly, or as groups (one computation)
    if left >= 2 and rng.random() < 0.5 or left == 1 and rng.random() < 0.25:
        g, m = rng.randint(2, 9), rng.randint(2, 15)
        x = ok(g * m)
        story.append(rng.choice([f"{name} has {g} {cont} with {m} {plur} in each.",
                                 f"{name} has {g} {cont} of {plur}, and each one holds {m} {plur}.",
                                 f"There are {m} {plur} in each of {name}'s {g} {cont}."]))
        reason.append(rng.choice([f"{name} has {g} {cont} with {m} {plur} each, so {g} * {m} = {x} {plur}.",
                                  f"{g} {cont} with {m} {plur} each make {g} * {m} = {x} {plur}.",
                                  f"First, {name} starts with {g} * {m} = {x} {plur}."]))
        left -= 1
    else:
        x = rng.randint(5, 120)
        story.append(rng.choice([f"{name} has {x} {plur}.", f"{name} starts with {x} {plur}.",
                                 f"{name} owns {x} {plur}.", f"There are {x} {plur} in {name}'s room."]))
    final_kind = "now"
    while left > 0:
        last = left == 1
        r = rng.random()
        if last and r < 0.25 and x >= 4:
            # division: share equally or pack into groups (final question changes)
            divs = [d for d in range(2, 11) if x % d == 0 and x // d >= 1]
            if divs:
                d = rng.choice(divs)
                y = x // d
                if rng.random() < 0.5:
                    f1 = rng.sample([n for n, _ in NAMES if n != name], 2)
                    who = f"{d} friends" if rng.random() < 0.6 else f"{d} classmates"
                    story.append(rng.choice([f"{cap(he)} shares the {plur} equally among {who}.",
                                             f"Then {he} splits all the {plur} equally between {who}."]))
                    final_kind = ("each", who.split()[1][:-1])
                    reason.append(rng.choice([f"Shared among {who}, each gets {x} / {d} = {y} {plur}.",
                                              f"{x} {plur} split {d} ways is {x} / {d} = {y} {plur} each."]))
                else:
                    story.append(rng.choice([f"{cap(he)} puts all the {plur} into bags of {d}.",
                                             f"Then {he} packs the {plur} in groups of {d}."]))
                    final_kind = "bags" if "bags" in story[-1] else "groups"
                    reason.append(rng.choice([f"With {d} {plur} in each, there are {x} / {d} = {y} {final_kind}.",
                                              f"{x} / {d} = {y}, so there are {y} {final_kind}."]))
                x = y
                left -= 1
                continue
        if r < 0.4:
            k = rng.randint(2, 60)
            y = ok(x + k)
            pres, past = rng.choice(ADD_VERBS)
            if rng.random() < 0.3:
                fn = other_person(rng, name)[0]
                story.append(rng.choice([f"{fn} gives {him} {k} more {plur}.", f"{cap(his)} friend {fn} gives {him} {k} {plur}."]))
                reason.append(rng.choice([f"{fn} gives {him} {k}, so {x} + {k} = {y} {plur}.",
                                          f"After getting {k} from {fn}, {name} has {x} + {k} = {y} {plur}."]))
            else:
                story.append(rng.choice([f"{cap(he)} {pres} {k} more {plur}.", f"Then {he} {pres} {k} {plur}.",
                                         f"Later, {name} {pres} another {k} {plur}."]))
                reason.append(rng.choice([f"{cap(he)} {past} {k} more, so {x} + {k} = {y} {plur}.",
                                          f"After that, {name} has {x} + {k} = {y} {plur}.",
                                          f"Adding {k} gives {x} + {k} = {y} {plur}."]))
            x = y
            left -= 1
        elif r < 0.8 and x >= 3:
            k = rng.randint(2, x - 1)
            y = ok(x - k)
            pres, past = rng.choice(SUB_VERBS)
            if pres == "gives away" and rng.random() < 0.5:
                fn = other_person(rng, name)[0]
                story.append(f"{cap(he)} gives {k} {plur} to {fn}.")
                reason.append(rng.choice([f"{cap(he)} gives {k} to {fn}, so {x} - {k} = {y} {plur} are left.",
                                          f"After giving {k} to {fn}, {name} has {x} - {k} = {y} {plur}."]))
            else:
                story.append(rng.choice([f"{cap(he)} {pres} {k} of them.", f"Then {he} {pres} {k} {plur}.",
                                         f"After that, {name} {pres} {k} {plur}."]))
                reason.append(rng.choice([f"{cap(he)} {past} {k}, so {x} - {k} = {y} {plur} are left.",
                                          f"Taking away {k} leaves {x} - {k} = {y} {plur}.",
                                          f"Now {name} has {x} - {k} = {y} {plur}."]))
            x = y
            left -= 1
        elif left >= 2 and rng.random() < 0.6:
            # buys more groups: two computations
            g, m = rng.randint(2, 6), rng.randint(2, 12)
            z = ok(g * m)
            y = ok(x + z)
            story.append(rng.choice([f"{cap(he)} buys {g} more {cont} with {m} {plur} in each.",
                                     f"Then {he} gets {g} new {cont}, each with {m} {plur}."]))
            reason.append(rng.choice([f"The new {cont} hold {g} * {m} = {z} {plur}.",
                                      f"{g} {cont} with {m} {plur} each is {g} * {m} = {z} {plur}."]))
            reason.append(rng.choice([f"In total {name} has {x} + {z} = {y} {plur}.",
                                      f"So {name} now has {x} + {z} = {y} {plur}."]))
            x = y
            left -= 2
        else:
            f, word = rng.choice([(2, "doubles"), (3, "triples"), (2, "doubles")])
            y = ok(x * f)
            story.append(rng.choice([f"Then {name} {word} the number of {plur}.",
                                     f"After a trade, {he} has {f} times as many {plur} as before."]))
            reason.append(rng.choice([f"Having {f} times as many means {x} * {f} = {y} {plur}.",
                                      f"{cap(he)} {word[:-1]}d them, so {x} * {f} = {y} {plur}."
                                      if word.endswith("s") else f"{x} * {f} = {y} {plur}."]))
            x = y
            left -= 1
    if isinstance(final_kind, tuple):
        q = rng.choice([f"How many {plur} does each {final_kind[1]} get?",
                        f"How many {plur} does each {final_kind[1]} receive?"])
    elif final_kind in ("bags", "groups"):
        q = rng.choice([f"How many {final_kind} does {name} make?", f"How many {final_kind} are there?"])
    else:
        q = rng.choice([f"How many {plur} does {name} have now?", f"How many {plur} does {he} have at the end?",
                        f"How many {plur} does {name} have left?", f"How many {plur} are there now?"])
    return story, q, reason, x


def fam_shopping(rng, steps):
    name, (he, him, his) = rng.choice(NAMES)
    (s1, p1, r1), (s2, p2, r2) = rng.sample(ITEMS, 2)
    q1, c1 = rng.randint(2, 9), rng.randint(*r1)
    t1 = ok(q1 * c1)
    story = [rng.choice([f"{name} buys {q1} {p1} for ${c1} each.", f"{name} goes to the store and buys {q1} {p1}.",
                         f"At the market, {name} buys {q1} {p1} that cost ${c1} each."])]
    if "store and buys" in story[0]:
        story.append(f"Each {s1} costs ${c1}.")
    reason = [rng.choice([f"{q1} {p1} at ${c1} each cost {q1} * {c1} = ${t1}.",
                          f"The {p1} cost {q1} * {c1} = ${t1}.",
                          f"{name} pays {q1} * {c1} = ${t1} for the {p1}."])]
    total = t1
    # steps: 1 = one item; 2 = one item + change, or one item + a single extra item;
    # 3 = two items + total; 4 = two items + total + change
    change = steps == 4 or (steps == 2 and rng.random() < 0.5)
    if steps == 2 and not change:
        c2 = rng.randint(*r2)
        total = ok(t1 + c2)
        story.append(rng.choice([f"{cap(he)} also buys one {s2} for ${c2}.", f"Then {he} buys a {s2} that costs ${c2}."]))
        reason.append(rng.choice([f"With the {s2}, {he} spends {t1} + {c2} = ${total}.",
                                  f"Adding the {s2} makes {t1} + {c2} = ${total}."]))
    if steps >= 3:
        q2, c2 = rng.randint(2, 9), rng.randint(*r2)
        t2 = ok(q2 * c2)
        story.append(rng.choice([f"{cap(he)} also buys {q2} {p2} for ${c2} each.",
                                 f"Then {he} buys {q2} {p2} at ${c2} each."]))
        reason.append(rng.choice([f"{q2} {p2} at ${c2} each cost {q2} * {c2} = ${t2}.",
                                  f"The {p2} cost {q2} * {c2} = ${t2}."]))
        total = ok(t1 + t2)
        reason.append(rng.choice([f"Together {he} spends {t1} + {t2} = ${total}.",
                                  f"The total is {t1} + {t2} = ${total}."]))
    if change:
        bill = rng.choice([b for b in (10, 20, 50, 100, 200, 500) if b > total] or [None])
        if bill is None:
            raise Reject()
        story.append(rng.choice([f"{cap(he)} pays with a ${bill} bill.", f"{cap(he)} hands the cashier ${bill}."]))
        ch = ok(bill - total)
        reason.append(rng.choice([f"The change is {bill} - {total} = ${ch}.",
                                  f"{cap(he)} gets back {bill} - {total} = ${ch}."]))
        q = rng.choice([f"How much change does {name} get?", f"How much money does {name} get back?"])
        return story, q, reason, ch
    q = rng.choice([f"How much does {name} spend in total?", f"How much money does {name} spend?",
                    f"How many dollars does {name} pay in all?"])
    return story, q, reason, total


def fam_rate(rng, steps):
    name, (he, him, his) = rng.choice(NAMES)
    verb, unit, per, pers, (lo, hi) = rng.choice(RATES)
    r, t = rng.randint(lo, hi), rng.randint(2, 9)
    x = ok(r * t)
    story = [rng.choice([f"{name} {verb} {r} {unit} every {per} for {t} {pers}.",
                         f"Each {per}, {name} {verb} {r} {unit}. {cap(he)} does this for {t} {pers}."])]
    reason = [rng.choice([f"In {t} {pers} {name} {verb} {r} * {t} = {x} {unit}.",
                          f"{r} {unit} per {per} for {t} {pers} is {r} * {t} = {x} {unit}."])]
    q = rng.choice([f"How many {unit} does {name} finish in {t} {pers}?",
                    f"How many {unit} is that in {t} {pers}?"])
    if unit == "dollars":
        q = f"How many dollars does {name} {verb[:-1]} in {t} {pers}?"
    left = steps - 1
    if left >= 2:
        fn, (fhe, _, _) = other_person(rng, name)
        r2 = rng.randint(lo, hi)
        y = ok(r2 * t)
        s = ok(x + y)
        story.append(f"{fn} {verb} {r2} {unit} every {per} for the same {t} {pers}.")
        reason.append(rng.choice([f"{fn} {verb} {r2} * {t} = {y} {unit}.", f"In the same time {fn} {verb} {r2} * {t} = {y} {unit}."]))
        reason.append(rng.choice([f"Together they have {x} + {y} = {s} {unit}.", f"Both together make {x} + {y} = {s} {unit}."]))
        q = rng.choice([f"How many {unit} do they have together?", f"How many {unit} is that for both of them?"])
        x = s
        left -= 2
    if left >= 1:
        k = rng.randint(2, 30)
        if rng.random() < 0.5 or x <= k:
            y = ok(x + k)
            story.append(rng.choice([f"On top of that, {k} more {unit} are added at the end.",
                                     f"At the end there are {k} extra {unit}."]))
            reason.append(rng.choice([f"With {k} extra, {x} + {k} = {y} {unit}.", f"Adding {k} gives {x} + {k} = {y} {unit}."]))
        else:
            y = ok(x - k)
            story.append(rng.choice([f"Then {k} of the {unit} do not count.", f"Later {k} {unit} have to be taken off."]))
            reason.append(rng.choice([f"Taking off {k} leaves {x} - {k} = {y} {unit}.", f"{x} - {k} = {y} {unit} count."]))
        q = rng.choice([f"How many {unit} are there at the end?", f"How many {unit} count in the end?"])
        x = y
    return story, q, reason, x


def fam_compare(rng, steps):
    (a, _), (b, (bhe, _, _)), (c, _) = rng.sample(NAMES, 3)
    sing, plur, cont = rng.choice(OBJECTS)
    xa = rng.randint(3, 80)
    story = [f"{a} has {xa} {plur}."]
    reason = []
    k = rng.randint(2, 40)
    if rng.random() < 0.5:
        xb = ok(xa + k)
        story.append(rng.choice([f"{b} has {k} more {plur} than {a}.", f"{b} has {k} {plur} more than {a} does."]))
        reason.append(rng.choice([f"{b} has {xa} + {k} = {xb} {plur}.", f"{b} has {k} more than {a}, so {xa} + {k} = {xb} {plur}."]))
    else:
        if xa <= k:
            raise Reject()
        xb = ok(xa - k)
        story.append(rng.choice([f"{b} has {k} fewer {plur} than {a}.", f"{b} has {k} {plur} less than {a}."]))
        reason.append(rng.choice([f"{b} has {xa} - {k} = {xb} {plur}.", f"{b} has {k} fewer, so {xa} - {k} = {xb} {plur}."]))
    if steps == 1:
        q = rng.choice([f"How many {plur} does {b} have?", f"How many {plur} has {b} got?"])
        return story, q, reason, xb
    if steps == 2:
        s = ok(xa + xb)
        reason.append(rng.choice([f"Together they have {xa} + {xb} = {s} {plur}.", f"In total, {xa} + {xb} = {s} {plur}."]))
        q = rng.choice([f"How many {plur} do {a} and {b} have together?", f"How many {plur} do they have in total?"])
        return story, q, reason, s
    f, word = rng.choice([(2, "twice"), (3, "three times"), (2, "twice")])
    xc = ok(xb * f)
    story.append(f"{c} has {word} as many {plur} as {b}.")
    reason.append(rng.choice([f"{c} has {xb} * {f} = {xc} {plur}.", f"{c} has {word} as many as {b}, so {xb} * {f} = {xc} {plur}."]))
    if steps == 3:
        q = rng.choice([f"How many {plur} does {c} have?", f"How many {plur} has {c} got?"])
        reason.append(rng.choice([f"{c} and {b} together have {xc} + {xb} = {ok(xc + xb)} {plur}."]))
        q = rng.choice([f"How many {plur} do {b} and {c} have together?", f"How many {plur} do {c} and {b} have in all?"])
        return story, q, reason, xc + xb
    s = ok(xa + xb + xc)
    reason.append(rng.choice([f"Together they have {xa} + {xb} + {xc} = {s} {plur}.",
                              f"All three have {xa} + {xb} + {xc} = {s} {plur}."]))
    q = rng.choice([f"How many {plur} do the three of them have together?", f"How many {plur} do they have in total?"])
    return story, q, reason, s


FAMILIES = [(fam_inventory, 0.45), (fam_shopping, 0.2), (fam_rate, 0.15), (fam_compare, 0.2)]


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def render(system, user, reasoning, answer):
    prompt = ""
    if system is not None:
        prompt += f"<|im_start|>system\n{system}<|im_end|>\n"
    prompt += f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    text = prompt + f"<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>"
    return prompt, text


def make_problem(seed, steps=None):
    rng = random.Random(seed)
    if steps is None:
        steps = rng.choice([1, 2, 2, 3, 3, 4, 4])
    system = rng.choice(SYSTEMS) if rng.random() < SYSTEM_RATE else None
    prefix = rng.choice(USER_PREFIXES)
    funcs, weights = zip(*FAMILIES)
    for _ in range(1000):
        fam = rng.choices(funcs, weights)[0]
        try:
            story, q, reason, ans = fam(rng, steps)
        except Reject:
            continue
        if len(reason) != steps or ans < 0 or ans >= LIMIT:
            continue
        break
    else:
        raise RuntimeError(f"seed {seed}: no valid problem")
    user = prefix + " ".join(story) + " " + q
    reasoning = "\n".join(reason)
    answer = f"The answer is {ans}."
    prompt, text = render(system, user, reasoning, answer)
    return {"system": system, "user": user, "reasoning": reasoning, "answer": answer,
            "prompt": prompt, "text": text, "steps": steps}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=["train", "heldout"], default="train")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=None, help="default: 1 for train, 2 for heldout")
    ap.add_argument("--demo", action="store_true", help="write the 8 fixed demo problems")
    ap.add_argument("--exclude", default=None, help="JSONL whose user texts must not be generated")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.n >= SEED_STRIDE:
        sys.exit("--n must be < 10**7")
    excl = set()
    if a.exclude:
        with open(a.exclude) as f:
            excl = {json.loads(line)["user"] for line in f}
    recs = []
    if a.demo:
        recs = [make_problem(DEMO_SEED * SEED_STRIDE + i, steps=1 + i % 4) for i in range(8)]
    else:
        seed = a.seed if a.seed is not None else (1 if a.split == "train" else 2)
        i = 0
        while len(recs) < a.n:
            r = make_problem(seed * SEED_STRIDE + i)
            i += 1
            if r["user"] in excl:
                continue
            recs.append(r)
    with open(a.out, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
