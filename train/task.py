"""A seeded synthetic tool-calling task: what people ask a watch or a router.

Used to train a tiny Needle model from scratch and to evaluate it on held-out data.  Each
example is a tools block (1-4 tools of the universe :data:`TOOLS`, in random order), a query
and the calls the model should make::

    {"tools": [schema, ...], "query": "set a timer for 25 minutes", "calls":
     [{"name": "set_timer", "arguments": {"minutes": 25}}]}

Kinds of examples (shares in :data:`KIND_WEIGHTS`): one call of a tool in the block; two calls
of two tools in the block ("... and ..."); and the empty answer ``[]``, either for chit-chat or
for a request that a tool of the universe would serve but that tool is not in this block (the
model has to read the block, not remember the universe).

The prompt and the target follow docs/spec/prompt-and-tokenizer.md section 4 and are built
with the project's own renderer (:func:`generator.tools.prompt.render_prompt_ids`), so the
model is trained on exactly the bytes the firmware feeds it.

Evaluation splits.  Every argument value pool (cities, people, messages, devices, artists,
integers) is split into TRAIN and HELD-OUT values, and every tool has three sets of phrasing
templates:

- "heldout" (the figure the demo is judged by): new sentences made of the task's own words.
  Every word occurs in some train template, but no held-out template's longest literal run
  occurs in any train query, and every value is held out: a new wording of known words, and
  new values to copy.
- "novel" (reported beside it): wordings with words no train template uses ("beep my cell",
  "juice"), also with held-out values.  A model trained from scratch on this task alone cannot
  know those words, so this split measures how far keywords carry.

host_tests/test_task.py checks all of it, so held-out accuracy measures generalisation, not
memory.

Command line (writes JSON lines)::

    python -m train.task --split heldout --n 300 --seed 7 -o demo/eval/heldout.jsonl
    python -m train.task --split novel --n 300 --seed 7 -o demo/eval/novel.jsonl
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import re
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_MODEL = ROOT / "generator" / "data" / "tok1k.model"

SPLITS = ("train", "heldout", "novel")

#: Which side of the value pools each split draws from: both evaluation splits use only the
#: held-out values.
VALUES_OF = {"train": "train", "heldout": "heldout", "novel": "heldout"}

#: Largest number of tools in one example's block.
MAX_TOOLS = 4

#: Example kinds and their probabilities (single call, two calls, empty answer for a tool of
#: the universe missing from the block, empty answer for chit-chat).
KIND_WEIGHTS = {"single": 0.70, "multi": 0.12, "unserved": 0.09, "chitchat": 0.09}

#: Most tok1k tokens the schemas of one block may take together, each schema's compact JSON
#: encoded on its own (:func:`tool_tokens`).  With the template (13 tokens) and the longest
#: queries (under 60) the prompt stays within 300 tokens; only some 4-tool blocks of the
#: largest schemas (the two light tools, the alarm, the workout) are over and never drawn.
TOOLS_TOKEN_BUDGET = 224

#: Probability of capitalising a query that starts with template text ("Set a timer ...").
CAPITALISE = 0.25


# --------------------------------------------------------------------------- tool universe

def _tool(name: str, description: str, /, **properties: dict) -> dict:
    """A tool schema in the key order of spec section 4.1: name, description, parameters
    (``required`` lists every property and is left out when there is none, as the packages
    write it)."""
    parameters = {"type": "object", "properties": dict(properties)}
    if properties:
        parameters["required"] = list(properties)
    return {"name": name, "description": description, "parameters": parameters}


def _int(minimum: int, maximum: int) -> dict:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def _enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


_STRING = {"type": "string"}
ROOMS = ("kitchen", "bedroom", "living room", "office")
ACTIVITIES = ("run", "walk", "cycle", "swim", "yoga")

# Descriptions are one short sentence and properties carry no description unless the name
# alone is unclear: the whole prompt, four tools included, must stay within 300 tokens.
# get_weather and set_timer are demo/tools.json verbatim (the bundled demo must be in
# distribution).
_UNIVERSE = [
    _tool("get_weather", "Get the current weather for a city.",
          city={"type": "string", "description": "City name"}),
    _tool("set_timer", "Start a countdown timer.", minutes=_int(1, 600)),
    _tool("set_alarm", "Set an alarm.", hour=_int(0, 23), minute=_int(0, 59)),
    _tool("start_workout", "Start a workout.", activity=_enum(*ACTIVITIES)),
    _tool("send_message", "Send a text message.", contact=_STRING, text=_STRING),
    _tool("call_contact", "Call a contact.", name=_STRING),
    _tool("play_music", "Play music by an artist.", artist=_STRING),
    _tool("check_battery", "Report the battery level."),
    _tool("find_phone", "Make the paired phone ring."),
    _tool("measure_heart_rate", "Measure the heart rate."),
    _tool("set_lights", "Switch the lights.",
          room=_enum(*ROOMS), state=_enum("on", "off")),
    _tool("set_brightness", "Dim the lights.",
          room=_enum(*ROOMS), level=_int(0, 100)),
    _tool("set_thermostat", "Set the heating.", celsius=_int(10, 30)),
    _tool("enable_guest_wifi", "Turn on guest wifi.", hours=_int(1, 24)),
    _tool("reboot_router", "Restart the router."),
    _tool("block_device", "Block a device from the network.", name=_STRING),
    _tool("run_speed_test", "Measure the internet speed."),
]

#: The tool universe, name -> JSON schema (read-only: examples carry copies).
TOOLS: dict[str, dict] = {tool["name"]: tool for tool in _UNIVERSE}
TOOL_NAMES = tuple(TOOLS)

# Each tool's compact JSON: an example's block is json.loads of these, a cheap deep copy.
_TOOL_JSON = {name: json.dumps(schema, separators=(",", ":")) for name, schema in TOOLS.items()}

#: Tools one could argue would serve the other's request; an "unserved" example never puts
#: one of them in the block, so that its empty answer is unambiguous.
CONFUSABLE = {"set_lights": {"set_brightness"}, "set_brightness": {"set_lights"}}


# --------------------------------------------------------------------------- value pools

def _split(train, heldout) -> dict:
    """A pool as {"train": ..., "heldout": ...}; the two sides must not share a value."""
    train, heldout = tuple(train), tuple(heldout)
    assert train and heldout and not set(train) & set(heldout), (train, heldout)
    return {"train": train, "heldout": heldout}


#: Integers reserved for the held-out split, in every integer slot: no train query contains
#: any of them (as digits or as words).  None is a bound written in a schema.
HELDOUT_INTS = frozenset({3, 9, 14, 17, 22, 26, 35, 41, 48, 53, 66, 72, 87, 95, 105, 135,
                          270, 420})


def _int_pool(values) -> dict:
    """Split integer values into the held-out ones (:data:`HELDOUT_INTS`) and the rest."""
    values = sorted(set(values))
    return _split([v for v in values if v not in HELDOUT_INTS],
                  [v for v in values if v in HELDOUT_INTS])


# Free-string values are copied verbatim from the query into the call.  Mostly single plain
# words, a few with a space.  No digits anywhere (the held-out integers are checked as digit
# runs over whole queries), and no held-out value is a word of any train text.
POOLS = {
    "cities": _split(
        ["Lagos", "Paris", "London", "Tokyo", "Berlin", "Madrid", "Cairo", "Nairobi", "Lima",
         "Oslo", "Dublin", "Vienna", "Prague", "Warsaw", "Athens", "Lisbon", "Seoul", "Bangkok",
         "Delhi", "Mumbai", "Sydney", "Toronto", "Chicago", "Boston", "Denver", "Miami",
         "Seattle", "Dallas", "Accra", "Dakar", "Kyiv", "Hanoi", "Manila", "Jakarta", "Santiago",
         "Bogota", "Havana", "Istanbul", "Rome", "Moscow", "Quito", "Doha", "Dubai", "Riyadh",
         "Tehran", "Karachi", "Lahore", "Dhaka", "Kathmandu", "Beijing", "Shanghai", "Taipei",
         "Kyoto", "Busan", "Hamburg", "Munich", "Milan", "Naples", "Venice", "Geneva", "Montpellier",
         "Brussels", "Amsterdam", "Copenhagen", "Stockholm", "Budapest", "Belgrade",
         "Bucharest", "Zagreb", "Valencia", "Seville", "Marseille", "Lyon", "Glasgow",
         "Edinburgh", "Cardiff", "Belfast", "Montevideo", "Caracas", "Kinshasa", "Luanda",
         "Harare", "Kigali", "Abuja", "Vancouver", "Calgary", "Ottawa", "Houston", "Phoenix",
         "Atlanta", "Detroit", "Memphis", "Austin", "New York", "Los Angeles", "Buenos Aires",
         "Cape Town", "Hong Kong", "Mexico City", "Rio de Janeiro", "Las Vegas", "Tel Aviv",
         "San Francisco"],
        ["Reykjavik", "Helsinki", "Nagoya", "Porto", "Montreal", "Zurich", "Kampala", "Lusaka",
         "Tbilisi", "Perth", "Osaka", "Mombasa", "San Diego", "Kuala Lumpur", "Addis Ababa"]),
    "people": _split(
        ["Anna", "Tom", "Maria", "James", "Sofia", "Omar", "Lucas", "Emma", "Noah", "Mia",
         "Ahmed", "Chen", "Priya", "Carlos", "Fatima", "Ivan", "Grace", "Kofi", "Yuki", "Leo",
         "Sara", "David", "Lena", "Zoe", "Jack", "Quinn", "Jamal", "Aisha", "Diego", "Hannah",
         "Oliver", "Amara", "Kenji", "Farah", "Pablo", "Julia", "Viktor", "Sam", "Ella", "Hugo",
         "Nia", "Raj", "Liam", "Ben", "Chloe", "Dmitri", "Freya", "Tiago", "Yusuf", "Jade",
         "Max", "Claire", "Rafiq", "Lydia", "Mom", "Dad", "Grandma", "Anna Lee", "Dr Patel", "Uncle Joe", "Aunt Sue"],
        ["Beatrice", "Tariq", "Ingrid", "Mateo", "Nadia", "Rohan", "Olga", "Kwame", "Hiroshi",
         "Zainab", "Felix", "Aunt Rita"]),
    "messages": _split(
        ["running late", "I'm on my way", "see you soon", "call me back", "dinner is ready",
         "don't forget the keys", "happy birthday", "good night", "I'll be home soon",
         "meet me at the gym", "can you pick me up", "thanks for today", "the meeting moved",
         "bring some bread", "I miss you", "landed safely", "on the bus now", "love you",
         "come with us", "where are you", "just woke up", "the train is delayed",
         "pick up the kids", "lunch is on me", "be there in a bit", "don't wait up",
         "the car is fixed", "grab some milk", "I left my jacket", "we won the match",
         "check your email", "keep the door locked", "good luck today", "the water is off",
         "I'm at the station", "it's all done", "park at the back", "order food for us",
         "drive safe", "what a great day", "the guests arrived", "try again later",
         "I'm having an early night"],
        ["start without me", "the door is unlocked", "feed the cat please", "take an umbrella",
         "I found your wallet", "save me a seat", "the parcel arrived", "traffic is terrible"]),
    "devices": _split(
        ["Xbox", "PlayStation", "iPad", "Chromebook", "Roku", "Kindle", "Echo", "Smart TV",
         "kids tablet", "Tom's laptop", "garage camera", "Lena's phone", "MacBook", "Pixel",
         "Galaxy", "ThinkPad", "doorbell", "Sonos", "Fitbit", "work laptop", "Jack's iPhone",
         "smart fridge", "printer", "Alexa", "Steam Deck", "Surface", "drone",
         "Zoe's tablet", "Android box", "security camera", "Apple Watch"],
        ["Nintendo", "Fire Stick", "Apple TV", "Olga's phone", "baby monitor", "Nest"]),
    "artists": _split(
        ["Adele", "Queen", "Drake", "Shakira", "Coldplay", "Beyonce", "Rihanna", "Metallica",
         "Madonna", "Eminem", "ABBA", "Burna Boy", "Taylor Swift", "Daft Punk", "Bob Marley",
         "Miles Davis", "Ed Sheeran", "Bruno Mars", "Dua Lipa", "Prince", "Rosalia", "Wizkid",
         "Stromae", "Khalid", "Sia", "Pink Floyd", "The Beatles", "Elvis", "Mozart", "Bach",
         "Lorde", "Kendrick Lamar", "Frank Ocean", "Fleetwood Mac", "Tame Impala",
         "Arctic Monkeys", "Gorillaz", "Bad Bunny", "Celine Dion", "Amy Winehouse",
         "Nina Simone", "Louis Armstrong"],
        ["Radiohead", "Santana", "Nirvana", "Bjork", "Oasis", "Kraftwerk", "Fela Kuti",
         "Norah Jones", "Aretha Franklin"]),
    # Integer slots: natural ranges (the schema bounds or a sensible part of them).
    "minutes": _int_pool([*range(2, 121), 150, 180, 200, 240, 300, 360, 480, 600,
                          *HELDOUT_INTS]),
    "hours": _int_pool(range(2, 25)),
    "hour": _int_pool(range(0, 24)),
    "minute": _int_pool(range(0, 60)),
    "celsius": _int_pool(range(10, 31)),
    "level": _int_pool(range(1, 101)),
}

#: Queries no tool serves: chit-chat and requests for things outside the universe (a few
#: mention a city, a time or lights to teach that a word alone does not make a call).
CHITCHAT = _split(
    ["tell me a joke", "how are you?", "what's your name?", "thanks!", "good morning",
     "who are you?", "what's the meaning of life?", "I'm bored", "sing me a song",
     "what can you do?", "you're awesome", "what day is it?", "order a pizza",
     "book a flight to Paris", "translate hello into Spanish", "what's two plus two?",
     "who won the football?", "read me the news", "add milk to my shopping list",
     "open the garage door", "lock the front door", "how tall is Everest?", "good night",
     "I love you", "tell me a story", "what time is it in Tokyo?", "flip a coin",
     "recommend a movie", "the lights look nice today", "I had fun on my run"],
    ["do you ever dream?", "recite a poem about the sea", "what's the capital of Peru?",
     "buy more coffee pods", "convert dollars to euros", "who painted the Mona Lisa?",
     "order me a taxi", "teach me a French word", "what should I cook tonight?",
     "close the window blinds", "are robots going to take over?", "I had a long day"])

#: Every held-out string value, lower-cased (invented training values must avoid them).
_HELDOUT_STRINGS = tuple(v.lower() for pool in POOLS.values() for v in pool["heldout"]
                         if isinstance(v, str))

#: How two requests are joined in a two-call query.
CONNECTORS = (" and ", ", then ", " and then ", ", also ", " and also ")

#: Comma frames (a recipe's ``comma``: the share of one-request and empty-answer training
#: queries that get one).  Without them a comma is a cue for two calls: 41 % of the two-call
#: training queries hold one (their connectors) against 1.6 % of the one-call queries (two
#: templates), and the bundled model answered the held-out "I lost my phone, make it ring"
#: and "the wifi is down, restart the router" with the same call twice.  A frame is a lead
#: or a close around the request, made of training words only.
COMMA_LEADS = ("ok, ", "hey, ", "so, ", "quick one, ", "right, ", "I'm busy, ", "it's late, ")
COMMA_CLOSES = (", please", ", thanks", ", for me", ", right now", ", if you can", ", ok")


# --------------------------------------------------------------------------- slots

#: Share of training free strings that are invented (nonsense names and word salads) rather
#: than drawn from the pools: a model that only ever sees a hundred cities learns them by
#: heart; one that must also copy "Tavoreki" learns to copy, which is what an unseen held-out
#: value needs.  Held-out values always come from the held-out pools.
INVENTED_SHARE = 0.7

#: Share of invented words that are random letters ("Qzdurw") rather than pronounceable
#: syllables.  With syllables only, the second demo model guessed names from their first
#: letter ("Tariq" -> "Tomi", "Lagos" -> "Lago": invented names end in a vowel) instead of
#: copying them; a random-letter word cannot be guessed, only copied.
RANDOM_LETTERS_SHARE = 0.5
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou") + ("an", "el", "or", "ush")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_FILLER = ("the", "a", "is", "on", "at", "in", "my", "your", "we", "it", "now", "soon", "home",
           "back", "late", "ready", "done", "here", "there", "up", "out", "all", "good", "new")


def _invented_word(rng) -> str:
    if rng.random() < RANDOM_LETTERS_SHARE:
        word = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, 6)))
    else:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3))))
    return word.capitalize()


def invented_value(rng, kind: str, long: bool = False) -> str:
    """A free-string value no pool holds: a name of one or two invented words, or a short
    lowercase phrase; never containing (or inside) a held-out value.  ``long`` (the copy
    drills): names of one to three words, phrases of three to seven."""
    while True:
        if kind == "name":
            count = rng.randint(1, 3) if long else rng.choice((1, 1, 1, 2))
            value = " ".join(_invented_word(rng) for _ in range(count))
        else:
            words = [rng.choice(_FILLER) if rng.random() < 0.5 else _invented_word(rng).lower()
                     for _ in range(rng.randint(3, 7) if long else rng.randint(2, 4))]
            value = " ".join(words)
        low = value.lower()
        if not any(h in low or low in h for h in _HELDOUT_STRINGS):
            return value



_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """0..99 in English words ("twenty-five"), as people say timer lengths."""
    if not 0 <= n < 100:
        raise ValueError(f"{n} is not in 0..99")
    if n < 20:
        return _ONES[n]
    return _TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else "")


def _pool_split(split: str) -> str:
    """The value pool a split draws from: copy drills use the training values."""
    return "train" if split == "drill" else split


class _Text:
    """A free-string argument: the value appears verbatim in the query."""

    def __init__(self, arg: str, pool: str):
        self.arg, self.pool = arg, POOLS[pool]
        self.kind = "phrase" if pool == "messages" else "name"

    def sample(self, rng, split, form):
        if split == "drill":
            value = invented_value(rng, self.kind, long=True)
        elif split == "train" and rng.random() < INVENTED_SHARE:
            value = invented_value(rng, self.kind)
        else:
            value = rng.choice(self.pool[split])
        return value, {self.arg: value}


class _Int:
    """An integer argument, written in digits, or sometimes in words (below 100) where the
    templates read naturally that way ("ten minutes")."""

    def __init__(self, arg: str, pool: str, words: float = 0.0):
        self.arg, self.pool, self.words = arg, POOLS[pool], words

    def sample(self, rng, split, form):
        value = rng.choice(self.pool[_pool_split(split)])
        # words only in training: a held-out number never appears in training, so its word
        # ("nine") could not be learnt; its digits can, digit by digit
        if self.words and split == "train" and value < 100 and rng.random() < self.words:
            return number_words(value), {self.arg: value}
        return str(value), {self.arg: value}


class _Enum:
    """An enum argument; the query names the value in one of several ways.  ``phrasings``
    maps each value to {form: surfaces}; a template picks the form with ``{slot:form}``
    (default form "plain")."""

    def __init__(self, arg: str, phrasings: dict):
        self.arg, self.phrasings, self.values = arg, phrasings, tuple(phrasings)

    def sample(self, rng, split, form):
        value = rng.choice(self.values)
        return rng.choice(self.phrasings[value][form or "plain"]), {self.arg: value}


class _Clock:
    """An alarm time "H:MM" (24-hour clock), filling the hour and minute arguments."""

    def sample(self, rng, split, form):
        hour = rng.choice(POOLS["hour"][_pool_split(split)])
        minute = rng.choice(POOLS["minute"][_pool_split(split)])
        return f"{hour}:{minute:02d}", {"hour": hour, "minute": minute}


_ROOM = _Enum("room", {
    "kitchen": {"plain": ("kitchen",)},
    "bedroom": {"plain": ("bedroom",)},
    "living room": {"plain": ("living room", "lounge")},
    "office": {"plain": ("office", "study")},
})
_STATE = _Enum("state", {"on": {"plain": ("on",)}, "off": {"plain": ("off",)}})
# "noun": after "go for" / "start"; "ing": as an activity name; "plain": the enum word.
_ACTIVITY = _Enum("activity", {
    "run": {"plain": ("run",), "noun": ("a run", "a jog"), "ing": ("running", "jogging")},
    "walk": {"plain": ("walk",), "noun": ("a walk", "a stroll"), "ing": ("walking",)},
    "cycle": {"plain": ("cycle",), "noun": ("a bike ride", "a ride"),
              "ing": ("cycling", "biking")},
    "swim": {"plain": ("swim",), "noun": ("a swim",), "ing": ("swimming",)},
    "yoga": {"plain": ("yoga",), "noun": ("a yoga session", "some yoga"), "ing": ("yoga",)},
})


# --------------------------------------------------------------------------- templates

_PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")


class _Template:
    """One phrasing: text with ``{slot}`` / ``{slot:form}`` placeholders, plus arguments the
    wording itself implies (``fixed``, e.g. "lights out in the {room}" means state "off").
    Parsed once into literal and slot parts so that filling it is cheap."""

    def __init__(self, text: str, fixed: dict | None = None):
        self.text, self.fixed = text, dict(fixed or {})
        self.parts = []
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            if m.start() > pos:
                self.parts.append(text[pos:m.start()])
            self.parts.append((m.group(1), m.group(2)))
            pos = m.end()
        if pos < len(text):
            self.parts.append(text[pos:])
        self.starts_literal = isinstance(self.parts[0], str)

    def literals(self) -> list[str]:
        """The template's own words, the text between placeholders."""
        return [part for part in self.parts if isinstance(part, str)]

    def fill(self, rng, split, slots) -> tuple[str, dict]:
        """(query text, arguments) with each placeholder filled from the split's pools."""
        out, args = [], dict(self.fixed)
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                text, values = slots[part[0]].sample(rng, split, part[1])
                out.append(text)
                args.update(values)
        return "".join(out), args


class _Task:
    """How one tool is asked for: its slots and its templates per split (the "heldout" ones
    are added from :data:`HELDOUT_TEMPLATES`)."""

    def __init__(self, slots: dict, train: list, novel: list):
        self.slots = slots
        self.templates = {"train": self._parse(train), "novel": self._parse(novel)}

    @staticmethod
    def _parse(templates) -> tuple:
        """Templates given as "text" or ("text", fixed arguments)."""
        return tuple(_Template(*t) if isinstance(t, tuple) else _Template(t) for t in templates)


# Per tool: slots, TRAIN templates, NOVEL templates.  The novel wordings use words the train
# templates never use ("beep my cell", "juice"): a model trained from scratch on this task
# alone has no way to know them, so the "novel" split measures how far keywords carry, and
# is reported beside the main held-out figure, not as it.  host_tests/test_task.py checks
# that the longest literal run of every novel and held-out template occurs in no train query.
TASKS = {
    "get_weather": _Task(
        {"city": _Text("city", "cities")},
        ["what's the weather like in {city} right now?", "weather in {city}",
         "how's the weather in {city}?", "what is the weather in {city} today?",
         "is it raining in {city}?", "tell me the weather for {city}", "{city} weather please",
         "do I need a jacket in {city}?", "check the forecast for {city}"],
        ["how warm is it over in {city}?", "give me the current conditions in {city}",
         "any sunshine in {city} at the moment?", "what's it like outside in {city}?"]),
    "set_timer": _Task(
        {"minutes": _Int("minutes", "minutes", words=0.15)},
        ["set a timer for {minutes} minutes", "timer {minutes} minutes",
         "start a {minutes} minute timer", "countdown {minutes} minutes please",
         "remind me in {minutes} minutes", "can you time {minutes} minutes for me?",
         "set timer {minutes} min", "{minutes} minute timer"],
        ["put a countdown on for {minutes} minutes",
         "let me know when {minutes} minutes have passed", "I need a timer of {minutes} minutes",
         "ping me after {minutes} minutes"]),
    "set_alarm": _Task(
        {"time": _Clock()},
        ["set an alarm for {time}", "wake me up at {time}", "alarm at {time}",
         "I need to get up at {time}", "set my alarm to {time} please",
         "can you wake me at {time}?", "new alarm {time}", "set an alarm at {time} tomorrow"],
        ["make sure I'm awake by {time}", "schedule a wake-up alarm for {time}",
         "buzz me at {time}", "get me out of bed at {time}"]),
    "start_workout": _Task(
        {"activity": _ACTIVITY},
        ["start {activity:noun}", "I'm going for {activity:noun}", "track my {activity:ing}",
         "start a {activity} workout", "begin {activity:ing}", "log {activity:noun} for me",
         "record my {activity:ing} session", "workout: {activity}"],
        ["I'm about to start {activity:ing}", "kick off a {activity} session",
         "let's do some {activity:ing}", "fire up the {activity} tracker"]),
    "send_message": _Task(
        {"contact": _Text("contact", "people"), "text": _Text("text", "messages")},
        ["send a message to {contact} saying {text}", "text {contact} {text}",
         "tell {contact} that {text}", "message {contact}: {text}",
         "send {contact} a text: {text}", 'can you text {contact} "{text}"?',
         "write to {contact}: {text}", "let {contact} know {text}"],
        ["shoot {contact} a quick note that says {text}", "drop {contact} a short line: {text}",
         "could you ping {contact} with {text}", "pass this along to {contact}: {text}"]),
    "call_contact": _Task(
        {"name": _Text("name", "people")},
        ["call {name}", "phone {name}", "ring {name} please", "give {name} a call",
         "can you call {name}?", "dial {name}", "start a call with {name}",
         "I want to talk to {name}"],
        ["get {name} on the line", "place a voice call to {name}",
         "could you connect me with {name}?", "put me through to {name}"]),
    "play_music": _Task(
        {"artist": _Text("artist", "artists")},
        ["play {artist}", "play some {artist}", "put on {artist}", "I want to listen to {artist}",
         "play music by {artist}", "can you play {artist} songs?", "shuffle {artist}",
         "start some {artist} music"],
        ["queue up tracks from {artist}", "I'm in the mood for {artist}",
         "let's hear something by {artist}", "spin a few {artist} records"]),
    "check_battery": _Task(
        {},
        ["how much battery do I have?", "battery level", "check my battery",
         "what's my battery at?", "is my battery low?", "how much charge is left?",
         "show battery status"],
        ["will my watch last the rest of the day?", "what percentage am I on?",
         "am I running out of juice?", "how full is the battery?"]),
    "find_phone": _Task(
        {},
        ["find my phone", "where is my phone?", "make my phone ring", "I lost my phone",
         "help me find my phone", "locate my phone", "ring my phone"],
        ["I can't remember where I put my mobile", "my phone is missing somewhere in the house",
         "trigger the sound on my handset", "beep my cell"]),
    "measure_heart_rate": _Task(
        {},
        ["measure my heart rate", "what's my pulse?", "check my heart rate",
         "how fast is my heart beating?", "take my pulse", "heart rate please", "read my bpm"],
        ["what is my current beats per minute?", "how is my heartbeat right now?",
         "scan my pulse", "is my heart racing?"]),
    "set_lights": _Task(
        {"room": _ROOM, "state": _STATE},
        ["turn {state} the {room} lights", "switch {state} the lights in the {room}",
         "{room} lights {state}", "turn the {room} lights {state}",
         "lights {state} in the {room} please",
         ("kill the lights in the {room}", {"state": "off"}),
         ("light up the {room}", {"state": "on"}),
         ("I can't see anything in the {room}", {"state": "on"}),
         ("lights out in the {room}", {"state": "off"})],
        ["flip the {room} lights {state}", "can you get the {room} lamps {state}",
         ("it's too dark in the {room}", {"state": "on"}),
         ("nobody is in the {room}, shut the lights", {"state": "off"})]),
    "set_brightness": _Task(
        {"room": _ROOM, "level": _Int("level", "level")},
        ["set the {room} lights to {level}%", "dim the {room} to {level} percent",
         "{room} brightness {level}", "brightness in the {room} at {level}%",
         "make the {room} lights {level} percent", "change the {room} brightness to {level}",
         "set {room} lighting to {level}%"],
        ["adjust the {room} lamps to {level} percent", "I'd like the {room} at {level}% brightness",
         "bring the {room} lamps down to {level}%"]),
    "set_thermostat": _Task(
        {"celsius": _Int("celsius", "celsius")},
        ["set the thermostat to {celsius} degrees", "heat the house to {celsius}",
         "make it {celsius} degrees inside", "thermostat {celsius}",
         "set the heating to {celsius} celsius", "I want it {celsius} degrees in here",
         "change the temperature to {celsius}"],
        ["warm the place up to {celsius} degrees", "keep the flat at {celsius} C",
         "target {celsius} degrees on the heating"]),
    "enable_guest_wifi": _Task(
        {"hours": _Int("hours", "hours", words=0.15)},
        ["turn on guest wifi for {hours} hours", "enable the guest network for {hours} hours",
         "guest wifi {hours} hours", "open the guest Wi-Fi for {hours} hours",
         "let guests use the wifi for {hours} hours", "start guest wifi, {hours} hours",
         "give my visitors wifi for {hours} hours"],
        ["switch on visitor internet access for {hours} hours",
         "friends are coming, share the guest network for {hours} hours",
         "activate the guest hotspot for {hours} hours"]),
    "reboot_router": _Task(
        {},
        ["reboot the router", "restart the router", "restart the wifi",
         "the internet is down, reboot the router", "power cycle the router",
         "reboot wifi please", "turn the router off and on again"],
        ["my connection keeps dropping, give the modem a restart",
         "can you bounce the access point?", "do a fresh boot of the network box",
         "reset the router"]),
    "block_device": _Task(
        {"name": _Text("name", "devices")},
        ["block {name}", "block {name} from the wifi", "kick {name} off the network",
         "disconnect {name}", "ban {name} from the internet", "cut off {name}",
         "stop {name} from using the wifi"],
        ["deny network access to {name}", "blacklist {name} on the router",
         "{name} shouldn't be online anymore", "boot {name} off the internet"]),
    "run_speed_test": _Task(
        {},
        ["run a speed test", "how fast is my internet?", "test the internet speed",
         "check my connection speed", "speed test please", "is the wifi slow?",
         "measure my bandwidth"],
        ["what download rate am I getting?", "benchmark the connection",
         "how quick is the broadband today?"]),
}

#: The HELD-OUT phrasings (the "heldout" split, the figure the demo is judged by): new
#: sentences made of the task's own words.  Every word of every one occurs in some train
#: template, but no held-out template's longest literal run occurs in any train query, so a
#: held-out query is a wording the model has never seen, asking with words it knows
#: (docs: train/README.md "Held-out data").
HELDOUT_TEMPLATES = {
    "get_weather": ["what's the forecast for {city} today?", "tell me the weather in {city} right now",
                    "check the weather in {city} please", "how's the forecast for {city} today?"],
    "set_timer": ["start a timer for {minutes} minutes please", "can you set a {minutes} minute countdown?",
                  "set a countdown timer for {minutes} min", "{minutes} minute countdown please"],
    "set_alarm": ["set a new alarm for {time}", "can you set an alarm at {time} please?",
                  "I need to wake up at {time} tomorrow", "new alarm for {time} tomorrow please"],
    "start_workout": ["please begin a {activity} workout", "please log my {activity:ing}",
                      "start my {activity:ing} session"],
    "send_message": ["send a text to {contact} saying {text}", "can you tell {contact} that {text}?",
                     "write a message to {contact}: {text}", "let {contact} know that {text}"],
    "call_contact": ["please give {name} a ring", "can you phone {name} please?",
                     "I want to call {name}", "start a call to {name}"],
    "play_music": ["put on some {artist} songs", "can you shuffle {artist} music?",
                   "I want to listen to music by {artist}", "start some music by {artist}"],
    "check_battery": ["show my battery level", "how much battery is left?",
                      "check the battery status", "is my charge low?"],
    "find_phone": ["help me locate my phone", "where is my lost phone?", "can you ring my phone?",
                   "I lost my phone, make it ring"],
    "measure_heart_rate": ["check my pulse please", "measure my pulse", "what's my heart rate?",
                           "read my heart rate please"],
    "set_lights": ["switch the {room} lights {state} please",
                   "please switch {state} the {room} lights",
                   ("{room} lights out please", {"state": "off"}),
                   ("please light up the {room}", {"state": "on"})],
    "set_brightness": ["please dim the {room} lights to {level} percent",
                       "change the brightness in the {room} to {level}%",
                       "set the {room} lighting at {level} percent"],
    "set_thermostat": ["change the thermostat to {celsius} degrees",
                       "set the temperature to {celsius} celsius",
                       "I want the heating at {celsius} degrees"],
    "enable_guest_wifi": ["enable guest wifi for {hours} hours", "open the guest network for {hours} hours",
                          "turn on the guest Wi-Fi for {hours} hours",
                          "give my guests wifi for {hours} hours"],
    "reboot_router": ["please restart the router", "the wifi is down, restart the router",
                      "power cycle the wifi", "reboot the wifi please"],
    "block_device": ["kick {name} off the wifi", "ban {name} from the network",
                     "disconnect {name} from the wifi please", "cut {name} off the internet"],
    "run_speed_test": ["test my connection speed", "check the internet speed please",
                       "is my internet slow?", "run a bandwidth test"],
}
for _name, _templates in HELDOUT_TEMPLATES.items():
    TASKS[_name].templates["heldout"] = _Task._parse(_templates)

#: Phrasing texts per tool and split (read-only view for tests and reports).
TEMPLATES = {name: {split: tuple(t.text for t in task.templates[split]) for split in SPLITS}
             for name, task in TASKS.items()}

assert set(TASKS) == set(TOOLS), set(TASKS) ^ set(TOOLS)


# --------------------------------------------------------------------------- examples

def _request(rng, split, name, values=None) -> tuple[str, dict, bool]:
    """One request for tool ``name``: (query text, the call, starts with template text), in a
    phrasing of ``split`` with values of ``values`` (default: the split's own)."""
    task = TASKS[name]
    template = rng.choice(task.templates[split])
    text, args = template.fill(rng, values or VALUES_OF[split], task.slots)
    # Arguments in the schema's property order (spec section 4.1: source key order).
    props = TOOLS[name]["parameters"]["properties"]
    call = {"name": name, "arguments": {key: args[key] for key in props}}
    return text, call, template.starts_literal


@lru_cache(maxsize=1)
def tool_tokens() -> dict[str, int]:
    """Each tool's cost against :data:`TOOLS_TOKEN_BUDGET`: tok1k tokens of its compact JSON
    encoded alone (one more than it takes inside the prompt, the dummy-prefix piece)."""
    tok = load_tokenizer()
    return {name: len(tok.encode(text)) for name, text in _TOOL_JSON.items()}


def _block(rng, needed, exclude=(), max_size=MAX_TOOLS) -> list[dict]:
    """1..max_size tool schemas in random order, holding every tool of ``needed`` and no
    tool of ``exclude``, within :data:`TOOLS_TOKEN_BUDGET` (the other tools are drawn
    again until they fit; two tools plus the two smallest always do)."""
    cost = tool_tokens()
    others = [name for name in TOOL_NAMES if name not in needed and name not in exclude]
    size = rng.randint(max(1, len(needed)), max_size)
    while True:
        names = list(needed) + rng.sample(others, size - len(needed))
        if sum(cost[name] for name in names) <= TOOLS_TOKEN_BUDGET:
            break
    rng.shuffle(names)
    return [json.loads(_TOOL_JSON[name]) for name in names]


def _capitalise(rng, query: str, starts_literal: bool) -> str:
    """Sometimes write the first letter in upper case, never when the query starts with an
    argument value (which must stay verbatim)."""
    if starts_literal and query[:1].islower() and rng.random() < CAPITALISE:
        return query[0].upper() + query[1:]
    return query


_KINDS = tuple(KIND_WEIGHTS)
_KIND_CUM = tuple(itertools.accumulate(KIND_WEIGHTS.values()))


def _comma_frame(rng, query: str, lead: bool) -> tuple[str, bool]:
    """``query`` with a comma lead or close (:data:`COMMA_LEADS`, :data:`COMMA_CLOSES`);
    a close goes before the query's end mark."""
    if rng.random() < 0.5:
        return rng.choice(COMMA_LEADS) + query, True
    body = query.rstrip("?!.")
    return body + rng.choice(COMMA_CLOSES) + query[len(body):], lead


def _make_example(rng, split: str, comma: float = 0.0) -> dict:
    """One example of a kind drawn with :data:`KIND_WEIGHTS`; ``comma``: the share of
    one-request and empty-answer queries given a comma frame (train only)."""
    kind = rng.choices(_KINDS, cum_weights=_KIND_CUM)[0]
    if kind == "single":
        name = rng.choice(TOOL_NAMES)
        query, call, lead = _request(rng, split, name)
        tools, calls = _block(rng, [name]), [call]
    elif kind == "multi":
        first, second = rng.sample(TOOL_NAMES, 2)
        query_a, call_a, lead = _request(rng, split, first)
        query_b, call_b, _ = _request(rng, split, second)
        # The first request loses its end punctuation; calls come in the order asked.
        query = query_a.rstrip("?!.") + rng.choice(CONNECTORS) + query_b
        tools, calls = _block(rng, [first, second]), [call_a, call_b]
    elif kind == "unserved":
        # A real request, but its tool is left out of the block: the answer is [].
        name = rng.choice(TOOL_NAMES)
        query, _, lead = _request(rng, split, name)
        tools, calls = _block(rng, [], {name} | CONFUSABLE.get(name, set())), []
    else:
        query, lead = rng.choice(CHITCHAT[VALUES_OF[split]]), True
        tools, calls = _block(rng, []), []
    if comma and kind != "multi" and rng.random() < comma:
        query, lead = _comma_frame(rng, query, lead)
    return {"tools": tools, "query": _capitalise(rng, query, lead), "calls": calls}


def make_examples(split: str, n: int, seed: int, comma: float = 0.0) -> list[dict]:
    """``n`` examples of ``split`` (one of :data:`SPLITS`), the same for the same arguments.
    ``comma`` (train only, a recipe's ``comma``): the share of one-request and empty-answer
    queries given a comma frame (:func:`_comma_frame`); 0 draws exactly the examples of
    before the option.

    Each is {"tools": [schema, ...], "query": str, "calls": [{"name", "arguments"}, ...]}.
    Held-out and novel examples are distinct (tools block and query); train examples may repeat, as
    draws from a distribution do.  The first m examples of n are those of m.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    if not 0.0 <= comma < 1.0 or (comma and split != "train"):
        raise ValueError(f"comma must be in [0, 1) and only for the train split, not {comma}")
    rng = random.Random(seed)
    examples, seen = [], set()
    attempts = 0
    while len(examples) < n:
        attempts += 1
        if attempts > 20 * n + 1000:
            raise ValueError(f"cannot draw {n} distinct {split} examples")
        example = _make_example(rng, split, comma)
        if split != "train":
            key = (tools_text(example), example["query"])
            if key in seen:
                continue
            seen.add(key)
        examples.append(example)
    return examples


# --------------------------------------------------------------------------- copy drills

#: Tools with an argument copied from the query (a free string, an integer or a clock time).
DRILL_TOOLS = tuple(name for name, t in TASKS.items()
                    if any(isinstance(slot, (_Text, _Int, _Clock)) for slot in t.slots.values()))
#: Share of drills whose tool is missing from the (one- or two-tool) block: answer [].
DRILL_UNSERVED = 0.2
#: Share of drills that are generated chit-chat (:data:`CHITCHAT_FORMS`): answer [].
DRILL_CHITCHAT = 0.15
DRILL_MAX_TOOLS = 2

#: Chit-chat made of invented words and training values: thirty fixed chit-chat lines teach
#: a model those thirty lines; these teach it that a request naming no tool's action gets
#: [] whatever its words (and that a city or a name alone does not make a call).  Only
#: training words: the held-out chit-chat stays unseen.
CHITCHAT_FORMS = (
    "tell me about {thing}", "what is {thing}?", "who is {name}?", "I like {thing}",
    "do you know {name}?", "what do you think of {thing}?", "explain {thing} to me",
    "{thing} is great", "what's a {thing}?", "how do I make {thing}?", "is {thing} good?",
    "where can I buy {thing}?", "can you help me with {thing}?", "{name} says hi",
    "I met {name} today", "how old is {name}?", "I visited {city} last year",
    "{city} is beautiful", "is {name} from {city}?", "have you been to {city}?",
    "{name} likes {thing}", "I need more {thing}", "what rhymes with {thing}?",
)


def _chitchat(rng) -> str:
    """One generated chit-chat line (:data:`CHITCHAT_FORMS`)."""
    form = rng.choice(CHITCHAT_FORMS)
    fills = {"thing": lambda: " ".join(_invented_word(rng).lower()
                                       for _ in range(rng.choice((1, 1, 2)))),
             "name": lambda: invented_value(rng, "name"),
             "city": lambda: rng.choice(POOLS["cities"]["train"])}
    return _PLACEHOLDER.sub(lambda m: fills[m.group(1)](), form)


def make_drills(n: int, seed: int) -> list[dict]:
    """``n`` short training examples, mostly copying and deciding on the empty call: a
    block of one or two tools, a training phrasing, and a long invented string (a name of one
    to three words, a phrase of three to seven) or a training integer to copy; :data:`DRILL_UNSERVED`
    of them ask for a tool the block lacks and :data:`DRILL_CHITCHAT` are generated
    chit-chat.  They are ordinary examples of the task (same prompt and target form), two
    thirds as long as the average one with 1.7 times its copied characters; the trainer
    mixes them in (the recipe's ``drills``).  Values and phrasings are training ones: the
    held-out sets stay unseen."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        draw = rng.random()
        if draw < DRILL_CHITCHAT:
            query, lead, calls = _chitchat(rng), True, []
            tools = _block(rng, [], max_size=DRILL_MAX_TOOLS)
        elif draw < DRILL_CHITCHAT + DRILL_UNSERVED:
            name = rng.choice(TOOL_NAMES)
            query, _, lead = _request(rng, "train", name)
            tools = _block(rng, [], {name} | CONFUSABLE.get(name, set()), DRILL_MAX_TOOLS)
            calls = []
        else:
            name = rng.choice(DRILL_TOOLS)
            query, call, lead = _request(rng, "train", name, values="drill")
            tools, calls = _block(rng, [name], max_size=DRILL_MAX_TOOLS), [call]
        out.append({"tools": tools, "query": _capitalise(rng, query, lead), "calls": calls})
    return out


#: Longest echo answer in pieces (the recipes' ans_len is 72 with EOS).
ECHO_MAX_PIECES = 64
#: Closing phrases an echo query may end with, left out of the answer (a recipe's
#: ``echo.tail_share`` of the queries; none starts with a filler word of a passage).  An echo
#: that always runs to the end of the query teaches copying to the end: the first Needle 3
#: trained with echoes answered the demo query "what's the weather like in Lagos right now?"
#: with the city "Lagos right now".
ECHO_TAILS = ("please", "right now", "thanks", "for me", "today", "tonight", "right away",
              "when you can", "thank you", "please?", "right now?", "today?")


def _pieces_of(tok, prompt_ids: list) -> tuple[list, list, str]:
    """A prompt's pieces after BOS: their surfaces, where each starts in the joined surfaces
    (and where the last ends), and the joined surfaces ("▁" for every space)."""
    surfaces = [tok.id_to_piece(i) for i in prompt_ids[1:]]
    return surfaces, list(itertools.accumulate(map(len, surfaces), initial=0)), "".join(surfaces)


def make_echoes(n: int, seed: int, tok, tail_share: float = 0.0) -> list[tuple[list, list]]:
    """``n`` encoded echo drills for the start of training: ``(prompt_ids, target_ids)`` of a
    prompt with an empty tools block whose query is a passage of 4 to 14 training-only words
    (invented names and words, filler, integers), in ``tail_share`` of them followed by a
    closing phrase (:data:`ECHO_TAILS`), answered by the passage itself, piece for piece.  Every answer token is a copy of the token after the one the model last copied,
    so the loss teaches the two-step copy (find the previous piece in the query, take its
    successor) that copying an argument value needs, at fifty times the density of the task's
    own answers.  No example of the task has an empty tools block, so the echo is never an
    answer to it."""
    from generator.tools.prompt import render_prompt_ids
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        words = []
        for _ in range(rng.randint(4, 14)):
            draw = rng.random()
            if draw < 0.45:
                word = _invented_word(rng)
                words.append(word if rng.random() < 0.5 else word.lower())
            elif draw < 0.8:
                words.append(rng.choice(_FILLER))
            else:
                words.append(str(rng.randint(0, 999)))
        passage = " ".join(words)
        low = passage.lower()
        if any(h in low for h in _HELDOUT_STRINGS if len(h) > 3):
            continue
        query = passage + (" " + rng.choice(ECHO_TAILS) if tail_share and rng.random() < tail_share else "")
        prompt = render_prompt_ids(tok, "[]", query)
        surfaces, starts, joined = _pieces_of(tok, prompt)
        at = joined.rfind(passage.replace(" ", "▁"))
        if at not in starts:
            continue
        if at + len(passage) not in starts:
            continue
        k = starts.index(at)                # the passage's first piece (it follows "\n")
        end = starts.index(at + len(passage))
        body = prompt[1 + k: 1 + end]
        if len(body) > ECHO_MAX_PIECES:
            continue
        out.append((prompt, body + [tok.eos_id]))
    return out


def example_kind(example: dict) -> str:
    """"single", "multi", "chitchat" or "unserved" (an empty answer to a query that is not
    chit-chat), read back from an example."""
    calls = example["calls"]
    if calls:
        return "single" if len(calls) == 1 else "multi"
    query = example["query"]
    return ("chitchat" if query in _ALL_CHITCHAT or query[:1].lower() + query[1:] in _ALL_CHITCHAT
            else "unserved")


_ALL_CHITCHAT = frozenset(CHITCHAT["train"] + CHITCHAT["heldout"])


# --------------------------------------------------------------------------- text and ids

def tools_text(example: dict) -> str:
    """The tools block as compact JSON (spec section 4.1 TOOLS_JSON)."""
    return json.dumps(example["tools"], separators=(",", ":"), ensure_ascii=False)


def target_text(example: dict) -> str:
    """The training target of spec section 4.1, without a think block."""
    answers = json.dumps(example["calls"], separators=(",", ":"), ensure_ascii=False)
    return f"<tool_call>{answers}</tool_call><|im_end|>"


@lru_cache(maxsize=1)
def load_tokenizer():
    """The tok1k tokenizer exactly as the synthesised archives carry it: the blob
    ``build_blob`` writes from generator/data/tok1k.model (add_dummy_prefix 1, byte
    fallback), read back as a :class:`generator.archive.tokenizer.Tokenizer`."""
    from generator.archive.tokenizer import Tokenizer, build_blob
    return Tokenizer.from_blob(build_blob(TOKENIZER_MODEL))


def encode(example: dict, tok, aligned: bool = False) -> tuple[list[int], list[int]]:
    """(prompt_ids, target_ids) for training or scoring.

    ``tok`` is a :class:`generator.archive.tokenizer.Tokenizer` (or anything with
    ``encode`` and ``bos_id`` / ``eos_id``, as ``render_prompt_ids`` needs).  The prompt is
    ``[BOS] + encode(prompt)``; the target is encoded on its own, as spec section 4.3 says,
    so it starts with the dummy-prefix piece "▁", and ends with EOS.

    ``aligned`` (a recipe's ``aligned_targets``): every argument value copied from the query
    is written with the query's own pieces (:func:`aligned_target_ids`), so copying it is
    "the first piece without its space, then the pieces that follow it in the query".
    """
    from generator.tools.prompt import render_prompt_ids
    prompt_ids = render_prompt_ids(tok, tools_text(example), example["query"])
    if aligned:
        return prompt_ids, aligned_target_ids(example, tok, prompt_ids) + [tok.eos_id]
    target_ids = tok.encode(target_text(example)) + [tok.eos_id]
    return prompt_ids, target_ids


def _without_prefix(tok):
    """``tok`` encoding text as a continuation: no dummy-prefix "▁" in front."""
    plain = copy.copy(tok)
    plain.add_dummy_prefix = 0
    return plain


def aligned_target_ids(example: dict, tok, prompt_ids: list) -> list:
    """The target's ids (without EOS) with every copied argument value in the query's pieces.

    The joint encoding of the target splits a copied value by its JSON neighbours, not as the
    query does: "start without me" is `▁st art ▁with out ▁me` in the query but `start ▁with
    out ▁me` after `":"`, and a model trained on that must know how every word is spelled
    to copy it.  Here the value's pieces are the query's, the first one without its "▁"
    (re-encoded if that surface is no piece): the text is the same, only the split differs,
    and a greedy decoder may emit any split of valid text.  The JSON between values keeps its
    own encoding (as a continuation, no dummy prefix).  Values the query does not hold on
    piece boundaries keep the joint encoding; the result always decodes to target_text."""
    text = target_text(example)
    surfaces, starts, joined = _pieces_of(tok, prompt_ids)
    query_at = joined.rfind(example["query"].replace(" ", "▁"))
    if query_at < 0:
        return tok.encode(text)
    first_piece = {a: k for k, a in enumerate(starts[:-1])}
    piece_end = {b: k for k, b in enumerate(starts[1:])}
    plain = _without_prefix(tok)
    ids, cursor = [], 0
    for call in example["calls"]:
        for key, value in call["arguments"].items():
            shown = json.dumps(value, ensure_ascii=False)
            raw = shown[1:-1] if isinstance(value, str) else shown
            if isinstance(value, bool) or not raw or (isinstance(value, str) and raw != value):
                continue
            at = text.find(json.dumps(key) + ":" + shown, cursor)
            if at < 0:
                continue
            v_at = at + len(json.dumps(key)) + 1 + (1 if isinstance(value, str) else 0)
            found = joined.find(raw.replace(" ", "▁"), query_at)
            if found < 0:
                continue
            end = found + len(raw)
            if found in first_piece:
                k, strip = first_piece[found], False
            elif joined[found - 1] == "▁" and found - 1 in first_piece:
                k, strip = first_piece[found - 1], True
            else:
                continue
            if end not in piece_end:
                continue
            pieces = list(prompt_ids[1 + k: 2 + piece_end[end]])
            if strip:
                head = surfaces[k][1:]
                pieces = pieces[1:]
                if head:
                    pieces = plain.encode(head.replace("▁", " ")) + pieces
            ids += (tok if cursor == 0 else plain).encode(text[cursor:v_at]) + pieces
            cursor = v_at + len(raw)
    ids += (tok if cursor == 0 else plain).encode(text[cursor:])
    if tok.decode(ids) != text:
        return tok.encode(text)
    return ids


# --------------------------------------------------------------------------- command line

def to_jsonl(examples) -> str:
    """Examples as JSON lines, one per line, non-ASCII written as itself."""
    return "".join(json.dumps(example, ensure_ascii=False) + "\n" for example in examples)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m train.task",
        description="Write examples of the synthetic watch/router tool-calling task as JSON lines.")
    parser.add_argument("--split", choices=SPLITS, default="train")
    parser.add_argument("--n", type=int, default=300, help="number of examples (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", default="-", help="output file ('-': stdout)")
    args = parser.parse_args(argv)
    text = to_jsonl(make_examples(args.split, args.n, args.seed))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8", newline="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
