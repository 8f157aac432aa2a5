"""The prompts a head is self-distilled on (the target answers them, distill.py): request
shapes crossed with subjects, so replies span prose, lists, dialogue and code, plus
corpus_open.py's open requests. None is a prompt of ``specchat bench``'s sets.
"""

from __future__ import annotations

import random

from specchat.training.corpus_open import open_requests

SUBJECTS = [
    "volcanoes", "the water cycle", "black holes", "honey bees", "the Roman Empire", "electric cars",
    "photosynthesis", "the stock market", "vaccines", "coral reefs", "the printing press", "jazz music",
    "solar panels", "the human heart", "glaciers", "chess", "coffee", "the internet", "earthquakes",
    "the moon landing", "recycling", "octopuses", "bread baking", "the immune system", "wind turbines",
    "ancient Egypt", "rainforests", "public libraries", "bicycles", "memory and sleep", "tides",
    "the French Revolution", "compost", "penguins", "satellites", "inflation", "mountains", "tea",
    "the periodic table", "friendship", "birds migrating", "trains", "deserts", "origami",
    "the Olympic Games", "lightning", "museums", "rivers", "microscopes", "gardening",
]

SHAPES = [
    "Explain {s} in simple terms.",
    "Write a short story in which {s} play an important part.",
    "Give me five interesting facts about {s}.",
    "What are the most common misconceptions about {s}?",
    "Write a short poem about {s}.",
    "Explain {s} to a ten-year-old.",
    "Write a friendly email inviting a colleague to a talk about {s}.",
    "List the pros and cons of learning more about {s}.",
    "Summarise the history of {s} in a few paragraphs.",
    "Describe {s} as if you were a tour guide.",
    "What questions would a curious student ask about {s}, and how would you answer them?",
    "Write a dialogue between two friends discussing {s}.",
]

STANDALONE = [
    "How do I make a good cup of tea?", "What should I pack for a weekend hiking trip?",
    "Give me tips for learning a new language as an adult.", "How can I stay focused while working from home?",
    "Write a thank-you note to a neighbour who watered my plants.", "What is a healthy breakfast I can make in five minutes?",
    "Plan a three-day trip to Rome for a first-time visitor.", "How do I prepare for a job interview?",
    "What are good habits for saving money?", "Explain the difference between weather and climate.",
    "Write a limerick about a forgetful cat.", "How do I start running if I have never exercised?",
    "Suggest names for a small bakery.", "What makes a good password?", "How do airplanes stay in the air?",
    "Write a short bedtime story about a brave little turtle.", "How do I politely decline an invitation?",
    "What are the main causes of traffic jams?", "Give me a recipe for a simple vegetable soup.",
    "How does a refrigerator keep food cold?", "What should I know before adopting a dog?",
    "Explain what a recession is.", "Write a motivational message for a friend starting a new job.",
    "How do I write a good cover letter?", "What is the difference between a virus and a bacterium?",
    "Describe a perfect autumn day.", "How can I reduce my screen time?", "What are fun things to do on a rainy day?",
    "Explain how a bill becomes a law.", "Give me a study plan for learning basic algebra in a month.",
]

CODE = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python script that counts the words in a text file.",
    "Write a JavaScript function that removes duplicates from an array.",
    "Explain what a Python list comprehension is, with examples.",
    "Write a Python class for a simple bank account with deposit and withdraw methods.",
    "Write a SQL query that finds the ten customers who spent the most.",
    "Explain the difference between a list and a tuple in Python.",
    "Write a Python function that sorts a list of dictionaries by a key.",
    "Write a bash command that finds all files larger than 100 MB.",
    "Write a Python function that merges two sorted lists.",
    "Explain recursion with a short example in Python.",
    "Write a Python function to check whether a number is prime.",
    "Write a small HTML page with a heading and a button.",
    "Explain what an API is and give an example of using one in Python.",
    "Write a Python function that reverses the words in a sentence.",
]


def training_prompts(seed: int = 0) -> list[str]:
    """Every prompt, in a fixed order (1,076): the crossed shapes, standalone requests and
    code shuffled, then corpus_open.py's requests (so its last 24 are the held-out ones)."""
    prompts = [shape.format(s=s) for s in SUBJECTS for shape in SHAPES] + STANDALONE + CODE
    random.Random(seed).shuffle(prompts)
    return prompts + open_requests()


def split(prompts: list[str], held_out: int) -> tuple[list[str], list[str]]:
    """(training, held out): the last ``held_out`` prompts are never trained on; the
    acceptance curve printed while training is measured on their replies."""
    return prompts[: len(prompts) - held_out], prompts[len(prompts) - held_out:]
