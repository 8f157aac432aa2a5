"""The corpus's second half: open chat requests filled from slot lists. A head trained on
corpus.py's crossed shapes alone drafted open chat worse than its own held-out prompts
(docs/benchmarks/why-the-numbers.md); these widen what the target is seen answering.
"""

from __future__ import annotations

import random

CHARACTERS = ["a retired clockmaker", "a young astronaut", "a shy librarian", "a stray dog", "a farmer's daughter",
              "an old fisherman", "a robot vacuum cleaner", "a night-shift nurse", "a street musician", "a lonely giant",
              "a baker in Paris", "a curious fox", "a school bus driver", "a forgotten toy", "a mountain guide",
              "a detective on her last case", "a boy who cannot whistle", "a tired dragon", "a city pigeon", "a postwoman"]
EVENTS = ["discovers a hidden door in the attic", "loses something precious on a train", "meets a stranger during a storm",
          "has to cross a frozen lake", "receives a letter from the future", "wins a contest by accident",
          "gets lost in a snowy forest", "finds a map under the floorboards", "must keep a promise", "learns to fly",
          "opens a shop on a quiet street", "befriends a noisy neighbour", "wakes up in a different century",
          "searches for a missing cat", "hears a song nobody else can hear", "builds a boat from scraps"]
CONCEPTS = ["a hash table", "a compiler", "garbage collection", "the TCP protocol", "DNS", "a database index",
            "public-key encryption", "a GPU", "virtual memory", "a binary search tree", "version control with git",
            "an operating system scheduler", "a load balancer", "containerisation with Docker", "unit testing",
            "a REST API", "cloud computing", "a blockchain", "compression algorithms", "machine learning",
            "gradient descent", "a CPU cache", "floating-point numbers", "a web browser's rendering engine",
            "two-factor authentication", "a firewall", "an interpreter", "multithreading", "a linked list", "big-O notation",
            "the HTTP protocol", "a spreadsheet formula", "open-source software", "a password manager", "a search engine",
            "the Fourier transform", "a random number generator", "error-correcting codes", "a relational database",
            "an event loop"]
GOALS = ["eat more healthily", "learn to cook at home", "save money for a house", "be more productive in the morning",
         "make friends in a new city", "start a vegetable garden", "read more books", "get better at public speaking",
         "reduce stress at work", "learn to play the guitar", "keep a tidy home", "run a first marathon",
         "spend less time on social media", "become a better listener", "learn to draw", "travel on a small budget",
         "improve their handwriting", "prepare for a long flight", "care for an elderly parent", "start a small business",
         "write a novel", "get fit without a gym", "drink more water", "learn to swim as an adult",
         "organise a family reunion", "study for an exam", "move to another country", "negotiate a higher salary",
         "raise a puppy", "cut down on sugar"]
PAIRS = [("cats", "dogs as pets"), ("renting a flat", "buying a house"), ("travelling by train", "flying"),
         ("reading paper books", "reading e-books"), ("working from home", "working in an office"),
         ("summer", "winter holidays"), ("tea", "coffee"), ("cycling", "driving to work"), ("studying alone", "studying in a group"),
         ("learning from videos", "learning from books"), ("a gas stove", "an induction hob"), ("running", "swimming for fitness"),
         ("saving", "investing"), ("city parks", "national parks"), ("handwritten letters", "emails"),
         ("a small school", "a large school"), ("public transport", "owning a car"), ("classical music", "pop music"),
         ("board games", "video games"), ("cooking at home", "eating out"), ("a laptop", "a desktop computer"),
         ("early mornings", "late nights"), ("camping", "staying in a hotel"), ("oil paint", "watercolour"),
         ("a freelance career", "a salaried job")]
WHYS = ["do leaves change colour in autumn", "is the sea salty", "do we have seasons", "do cats purr",
        "does bread go stale", "do we dream", "do onions make us cry", "does ice float", "do birds fly south in winter",
        "do we get goosebumps", "is the moon sometimes visible during the day", "do our ears pop on a plane",
        "does the wind blow", "do we yawn", "do stars twinkle", "does metal feel colder than wood",
        "do zebras have stripes", "does popcorn pop", "do we need to drink water", "do volcanoes erupt",
        "do rainbows appear after rain", "does a compass point north", "do we have fingerprints", "do apples turn brown",
        "do bubbles pop", "does thunder follow lightning", "do plants need sunlight", "do we hiccup"]
AUDIENCES = ["a curious eight-year-old", "a teenager", "someone with no science background", "a grandparent",
             "a first-year university student"]
HOWS = ["a microwave oven", "a vaccine", "a solar panel", "a touchscreen", "GPS", "a bicycle gear", "a washing machine",
        "a heat pump", "an elevator", "a camera lens", "noise-cancelling headphones", "a credit card payment",
        "a hydroelectric dam", "a lock and key", "a thermostat", "a hot air balloon", "a submarine", "Wi-Fi",
        "a 3D printer", "an electric guitar", "a smoke detector", "a pressure cooker", "a barcode scanner",
        "the human eye", "a nuclear power plant", "a rocket engine", "a water filter", "a hearing aid"]
DIFFS = [("a crocodile", "an alligator"), ("weather", "mood"), ("a lake", "a pond"), ("baking soda", "baking powder"),
         ("a comet", "an asteroid"), ("a democracy", "a republic"), ("a violin", "a viola"), ("empathy", "sympathy"),
         ("a hurricane", "a tornado"), ("a psychologist", "a psychiatrist"), ("a frog", "a toad"),
         ("stocks", "bonds"), ("a loan", "a mortgage"), ("speed", "velocity"), ("a simile", "a metaphor"),
         ("a virus", "a worm in computing"), ("RAM", "storage"), ("an app", "a website"), ("jam", "jelly"),
         ("a moth", "a butterfly"), ("a bay", "a gulf"), ("affect", "effect"), ("a mammal", "a reptile"),
         ("an atom", "a molecule")]
SCENES = ["a busy market on a Saturday morning", "a quiet beach at sunrise", "an old railway station",
          "a kitchen during a family dinner", "a forest after heavy rain", "a small bookshop", "a city at night",
          "a mountain village in winter", "a school playground", "a harbour at dusk", "a desert campsite",
          "a hospital waiting room", "a garden in spring", "a crowded concert", "an abandoned factory"]
TOPICS = ["remote work", "electric scooters", "learning a musical instrument", "volunteering", "four-day work weeks",
          "homework for young children", "self-driving cars", "space tourism", "keeping a journal", "meditation",
          "buying second-hand clothes", "learning to code", "urban gardening", "online shopping", "zoos",
          "school uniforms", "nuclear energy", "tiny houses", "smartphones for children", "working night shifts"]


def open_requests() -> list[str]:
    """Every prompt of these families, in a fixed shuffled order (430)."""
    rng = random.Random(1)
    stories = [f"Tell me a story about {c} who {e}." for c in CHARACTERS for e in EVENTS]
    out = rng.sample(stories, 110)  # 110 of the 320 pairings
    out += [f"What is the idea behind {c}, and when would someone use it?" for c in CONCEPTS]
    out += [f"How does {c} work? Keep it short." for c in rng.sample(CONCEPTS, 15)]
    out += [f"I want to {g}. Where should I start?" for g in GOALS]
    out += [f"What mistakes do people make when they try to {g}?" for g in rng.sample(GOALS, 15)]
    out += [f"What are the trade-offs between {a} and {b}?" for a, b in PAIRS]
    out += [f"Which is better, {a} or {b}? Give both sides." for a, b in rng.sample(PAIRS, 12)]
    out += [f"Why {w}?" for w in WHYS] + [f"Can you explain to {a} why {w}?" for w in WHYS for a in rng.sample(AUDIENCES, 1)]
    out += [f"How does {h} work?" for h in HOWS]
    out += [f"Explain how {h} works, step by step." for h in rng.sample(HOWS, 12)]
    out += [f"What is the difference between {a} and {b}?" for a, b in DIFFS]
    out += [f"Describe {s} in vivid detail." for s in SCENES]
    out += [f"Write a short poem about {s}." for s in rng.sample(SCENES, 8)]
    out += [f"What are the arguments for and against {t}?" for t in TOPICS]
    out += [f"Write a short opinion piece about {t}." for t in rng.sample(TOPICS, 10)]
    out += [f"I am thinking about trying {t}. What should I know first?" for t in rng.sample(TOPICS, 10)]
    random.Random(5).shuffle(out)
    return out
