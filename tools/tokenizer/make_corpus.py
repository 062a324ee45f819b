"""Write the tokenizer training corpus in ``tools/tokenizer/corpus/``.

Two files come out of here:

* ``chat_transcripts.txt``: synthetic tool-calling chat transcripts in the exact prompt
  format of ``docs/spec/prompt-and-tokenizer.md`` section 4 (prompt immediately followed by its
  target), interleaved with short free-text lines in several scripts.  Produced by a seeded
  ``random.Random``, so the file is byte-for-byte reproducible on any Python 3.
  Records are separated by one blank line; a record never contains a blank line.
* ``pydoc_topics.txt`` (only with ``--with-pydoc-topics``): the topic strings of the
  running interpreter's ``pydoc_data/topics.py`` (Python Software Foundation License),
  sorted by topic key, duplicates dropped, joined by one blank line.  The committed copy was
  extracted from CPython 3.11.7; another interpreter version gives different text, which is
  why this part is opt-in.

Run from the repository root::

    .venv/bin/python tools/tokenizer/make_corpus.py                      # transcripts only
    .venv/bin/python tools/tokenizer/make_corpus.py --with-pydoc-topics  # both files
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import unicodedata
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
SEED = 20240611
N_TRANSCRIPTS = 2400
TRANSCRIPT_FILE = "chat_transcripts.txt"
PYDOC_FILE = "pydoc_topics.txt"


def dumps(obj) -> str:
    """Compact JSON exactly as the packages render it (section 4.1)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- value pools

CITIES = [
    "Lagos", "Nairobi", "Accra", "Cairo", "Casablanca", "Paris", "Lyon", "Marseille",
    "Berlin", "München", "Köln", "Zürich", "Genève", "Wien", "Kraków", "Łódź", "Praha",
    "Brno", "Budapest", "București", "Sofia", "Αθήνα", "Θεσσαλονίκη", "Москва",
    "Санкт-Петербург", "Київ", "Istanbul", "İzmir", "Reykjavík", "Oslo", "Tromsø",
    "Göteborg", "Malmö", "København", "Helsinki", "Tallinn", "Rīga", "Vilnius",
    "Lisboa", "Porto", "Madrid", "Málaga", "A Coruña", "Barcelona", "Roma", "Milano",
    "Napoli", "Torino", "São Paulo", "Bogotá", "Medellín", "Ciudad de México", "Quito",
    "Lima", "Asunción", "Montréal", "Québec", "Toronto", "Vancouver", "New York",
    "San Francisco", "Chicago", "Austin", "Seattle", "Honolulu", "東京", "大阪", "京都",
    "서울", "부산", "北京", "上海", "深圳", "台北", "香港", "Hà Nội", "Đà Nẵng",
    "Bangkok", "Jakarta", "Manila", "Mumbai", "Bengaluru", "Delhi", "Karachi", "Dubai",
    "Tel Aviv", "Auckland", "Wellington", "Sydney", "Melbourne", "Perth",
]
FIRST_NAMES = [
    "Ada", "Grace", "Alan", "Linus", "Margaret", "Chidi", "Amara", "Tunde", "Zoë",
    "Chloé", "Léa", "José", "Inés", "Joaquín", "Björn", "Søren", "Åsa", "Jürgen",
    "Małgorzata", "Dvořák", "Ελένη", "Νίκος", "Дмитрий", "Ольга", "Иван", "Олена",
    "Mehmet", "Ayşe", "Hiroshi", "さくら", "太郎", "민준", "서연", "李娜", "王伟",
    "Priya", "Arjun", "Fatima", "Omar", "Noa", "Kai", "Mateus", "Thảo", "Nguyễn",
    "Sam", "Alex", "Jordan", "Taylor", "Riley", "Morgan", "Jamie", "Robin",
]
LAST_NAMES = [
    "Lovelace", "Hopper", "Turing", "Okafor", "Adeyemi", "Dupont", "Müller", "García",
    "Núñez", "Kowalski", "Novák", "Papadopoulos", "Иванов", "Шевченко", "Yılmaz",
    "Tanaka", "山田", "김", "陈", "Sharma", "Haddad", "Levi", "Smith", "O'Brien",
    "Nakamura", "Ferreira", "Lindqvist", "Jensen", "Rossi", "Bianchi",
]
SONGS = [
    "Bohemian Rhapsody", "Clair de Lune", "La Vie en rose", "Despacito", "Für Elise",
    "Gymnopédie No. 1", "Água de Beber", "Калинка", "上を向いて歩こう", "강남스타일",
    "Redemption Song", "Superstition", "Take Five", "So What", "Hey Jude", "Dancing Queen",
    "Ojitos Lindos", "Jerusalema", "Naatu Naatu", "Ederlezi", "99 Luftballons",
]
ARTISTS = [
    "Queen", "Debussy", "Édith Piaf", "Luis Fonsi", "Beethoven", "Satie", "Astrud Gilberto",
    "Bob Marley", "Stevie Wonder", "Dave Brubeck", "Miles Davis", "The Beatles", "ABBA",
    "Bad Bunny", "Burna Boy", "Fela Kuti", "Sakamoto Kyu", "PSY", "Björk", "Rosalía",
]
LANGUAGES = [
    ("French", "fr"), ("Spanish", "es"), ("German", "de"), ("Italian", "it"),
    ("Portuguese", "pt"), ("Greek", "el"), ("Russian", "ru"), ("Ukrainian", "uk"),
    ("Japanese", "ja"), ("Korean", "ko"), ("Chinese", "zh"), ("Yoruba", "yo"),
    ("Swahili", "sw"), ("Turkish", "tr"), ("Polish", "pl"), ("Vietnamese", "vi"),
    ("Hindi", "hi"), ("Arabic", "ar"), ("Hebrew", "he"), ("Dutch", "nl"),
]
PHRASES = [
    "good morning", "where is the train station?", "thank you very much",
    "how much does this cost?", "I would like a coffee with oat milk", "see you tomorrow",
    "the meeting moved to Thursday", "happy birthday!", "please call me back",
    "is this seat taken?", "I'm allergic to peanuts", "two tickets to the museum",
]
TOPICS = [
    "electric cars", "the Champions League", "quantum computing", "interest rates",
    "the Mars rover", "jazz festivals", "solar panels", "the election", "Wimbledon",
    "climate summit", "open-source software", "the new iPhone", "bird flu", "K-pop",
    "Formula 1", "the Nobel prize", "vaccines", "earthquakes", "café culture",
]
ITEMS = [
    "milk", "eggs", "bread", "oat milk", "bananas", "coffee beans", "olive oil", "tomatoes",
    "crème fraîche", "jalapeños", "tofu", "rice", "dish soap", "batteries", "AA batteries",
    "toothpaste", "spinach", "feta", "pão de queijo", "kimchi", "味噌", "пельмени",
]
ROOMS = ["living room", "kitchen", "bedroom", "office", "hallway", "garage", "bathroom",
         "kids' room", "patio"]
DEVICES = ["lights", "lamp", "heater", "fan", "TV", "speaker", "air conditioner",
           "coffee machine", "vacuum", "porch light"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "NGN", "KES", "BRL", "INR", "CHF", "KRW", "CNY"]
CURRENCY_WORDS = {"USD": "dollars", "EUR": "euros", "GBP": "pounds", "JPY": "yen",
                  "NGN": "naira", "KES": "shillings", "BRL": "reais", "INR": "rupees",
                  "CHF": "francs", "KRW": "won", "CNY": "yuan"}
STOCKS = ["AAPL", "MSFT", "GOOG", "TSLA", "NVDA", "AMZN", "SAP", "TM", "BABA", "ASML"]
EMOJI = ["🙂", "😂", "🎉", "🔥", "👍", "🙏", "❤️", "🚀", "☀️", "🌧️", "🎵", "🍕", "✈️",
         "🏃‍♀️", "👩🏽‍💻", "🇳🇬", "🇯🇵", "🇫🇷", "⏰", "📅"]
SUBJECTS = ["lunch on Friday?", "quarterly report", "Re: the invoice", "trip photos",
            "rent reminder", "Urgent: server down", "Grüße aus Berlin", "Привет!",
            "お疲れ様です", "Party at mine 🎉", "Draft v2", "minutes from today"]
MESSAGES = ["running ten minutes late", "can you pick up the kids?", "on my way",
            "the package arrived", "dinner at 8?", "call me when you land",
            "je t'appelle ce soir", "¿nos vemos mañana?", "bin gleich da",
            "скоро буду", "今から帰ります", "좀 늦을 것 같아", "I'll bring dessert 🍰"]
NOTES = ["buy a birthday card for mum", "renew passport before July",
         "idea: a bot that waters the plants", "wifi password is on the fridge",
         "book the dentist", "call the landlord about the heating",
         "read 'Cien años de soledad'", "practise the Chopin étude", "pay the electricity bill"]
SYSTEM_FACTS = [
    ("locale", ["en-GB", "en-US", "fr-FR", "de-DE", "es-MX", "pt-BR", "ja-JP", "ko-KR",
                "el-GR", "ru-RU", "yo-NG", "sw-KE"]),
    ("device", ["phone", "watch", "car", "smart speaker", "laptop", "earbuds"]),
    ("battery", ["12%", "47%", "88%", "100%", "5%"]),
    ("network", ["wifi", "5g", "lte", "offline"]),
    ("location", ["Lagos", "Zürich", "Αθήνα", "Москва", "東京", "São Paulo", "Seattle"]),
    ("user", ["Ada", "Chidi", "Léa", "Νίκος", "Ольга", "太郎", "Priya"]),
]


# --------------------------------------------------------------------------- tool schemas

def prop(type_, description=None, **extra):
    out = {"type": type_}
    for key in ("enum", "items"):
        if key in extra:
            out[key] = extra.pop(key)
    if description is not None:
        out["description"] = description
    out.update(extra)
    return out


def schema(name, description, props, required, triggers=None):
    out = {"name": name}
    if description:
        out["description"] = description
    params = {"type": "object", "properties": dict(props)}
    if required:
        params["required"] = list(required)
    out["parameters"] = params
    if triggers:
        out["triggers"] = triggers
    return out


def build_tools():
    """Each entry: (schema, sampler) where sampler(rng) -> (query, arguments, reasoning)."""
    tools = []

    def add(sch, sampler):
        tools.append((sch, sampler))

    # weather -----------------------------------------------------------------------------
    add(schema("get_weather", "Get the current weather for a city.",
               [("city", prop("string"))], ["city"]),
        lambda r: _q1(r, "city", r.choice(CITIES), [
            "what's it like in {v} right now?", "weather in {v}", "is it raining in {v}?",
            "do I need an umbrella in {v} today", "how hot is it in {v}?",
            "Quel temps fait-il à {v} ?", "¿Qué tiempo hace en {v}?", "Wie ist das Wetter in {v}?",
            "Какая погода в {v}?", "{v}の天気は？", "{v} 날씨 어때?", "{v}今天天气怎么样？",
            "Τι καιρό κάνει στην {v};", "weather {v} pls ☔"]))
    add(schema("get_forecast", "Get the weather forecast for the next days.",
               [("city", prop("string", "City name.")),
                ("days", prop("integer", "Number of days to forecast.", minimum=1, maximum=14)),
                ("units", prop("string", "Temperature units.", enum=["celsius", "fahrenheit"]))],
               ["city", "days"]),
        _sample_forecast)
    # timers and alarms -------------------------------------------------------------------
    add(schema("set_timer", "Start a countdown timer.",
               [("minutes", prop("integer", "Duration in minutes.", minimum=1)),
                ("label", prop("string", "Optional label shown when it rings."))],
               ["minutes"]),
        _sample_timer)
    add(schema("set_alarm", "Set an alarm at a time of day.",
               [("time", prop("string", "Time in 24h HH:MM format.", pattern="^[0-2][0-9]:[0-5][0-9]$")),
                ("days", prop("array", "Weekdays to repeat on.", items={"type": "string"})),
                ("label", prop("string"))],
               ["time"]),
        _sample_alarm)
    # messaging ---------------------------------------------------------------------------
    add(schema("send_message", "Send a text message to a contact.",
               [("recipient", prop("string", "Contact name.")),
                ("message", prop("string", "Message body."))],
               ["recipient", "message"]),
        _sample_message)
    add(schema("send_email", "Compose and send an email.",
               [("to", prop("string", "Recipient email address.", format="email")),
                ("subject", prop("string", maxLength=120)),
                ("body", prop("string")),
                ("cc", prop("array", items={"type": "string"}))],
               ["to", "subject", "body"]),
        _sample_email)
    add(schema("call_contact", "Place a phone call.",
               [("name", prop("string", "Who to call.")),
                ("speaker", prop("boolean", "Use the loudspeaker."))],
               ["name"]),
        _sample_call)
    # calendar ----------------------------------------------------------------------------
    add(schema("create_event", "Create a calendar event.",
               [("title", prop("string")),
                ("date", prop("string", "Date as YYYY-MM-DD.", format="date")),
                ("start", prop("string", "Start time HH:MM.")),
                ("duration_minutes", prop("integer", minimum=5, maximum=1440)),
                ("attendees", prop("array", items={"type": "string"}, uniqueItems=True))],
               ["title", "date", "start"]),
        _sample_event)
    add(schema("list_events", "List calendar events on a given day.",
               [("date", prop("string", "Date as YYYY-MM-DD."))], ["date"]),
        _sample_list_events)
    # music and media ---------------------------------------------------------------------
    add(schema("play_music", "Play a song, album or artist.",
               [("query", prop("string", "What to play.")),
                ("shuffle", prop("boolean")),
                ("volume", prop("integer", minimum=0, maximum=100))],
               ["query"]),
        _sample_music)
    add(schema("set_volume", "Change the playback volume.",
               [("level", prop("integer", "Volume from 0 to 100.", minimum=0, maximum=100))],
               ["level"]),
        lambda r: _q1(r, "level", r.choice([0, 5, 10, 20, 25, 30, 40, 50, 65, 70, 80, 100]), [
            "set the volume to {v}", "volume {v}%", "turn it to {v} percent",
            "Lautstärke auf {v}", "mets le volume à {v}", "音量を{v}にして"]))
    add(schema("pause_media", "Pause whatever is playing.", [], []),
        lambda r: (r.choice(["pause", "stop the music", "pause it", "shh", "hold on, pause",
                             "Pause bitte", "pausa", "стоп"]), {}, ""))
    # home --------------------------------------------------------------------------------
    add(schema("control_device", "Turn a smart-home device on or off.",
               [("device", prop("string", "Device name.")),
                ("room", prop("string")),
                ("state", prop("string", enum=["on", "off"]))],
               ["device", "state"]),
        _sample_device)
    add(schema("set_thermostat", "Set the target temperature.",
               [("temperature", prop("number", "Target in degrees Celsius.", minimum=5, maximum=30)),
                ("room", prop("string"))],
               ["temperature"]),
        _sample_thermostat)
    # navigation --------------------------------------------------------------------------
    add(schema("get_directions", "Get directions between two places.",
               [("origin", prop("string")), ("destination", prop("string")),
                ("mode", prop("string", enum=["driving", "walking", "transit", "cycling"]))],
               ["destination"]),
        _sample_directions)
    add(schema("find_places", "Search for nearby places.",
               [("query", prop("string", "What to look for.")),
                ("open_now", prop("boolean")),
                ("max_results", prop("integer", minimum=1, maximum=20))],
               ["query"]),
        _sample_places)
    # knowledge ---------------------------------------------------------------------------
    add(schema("translate_text", "Translate text into another language.",
               [("text", prop("string")),
                ("target_language", prop("string", "ISO 639-1 code.", minLength=2, maxLength=2))],
               ["text", "target_language"]),
        _sample_translate)
    add(schema("search_web", "Search the web.",
               [("query", prop("string"))], ["query"]),
        _sample_search)
    add(schema("get_news", "Get the latest headlines.",
               [("topic", prop("string")), ("count", prop("integer", minimum=1, maximum=10))],
               []),
        _sample_news)
    add(schema("convert_currency", "Convert an amount between currencies.",
               [("amount", prop("number", exclusiveMinimum=0)),
                ("from_currency", prop("string", enum=CURRENCIES)),
                ("to_currency", prop("string", enum=CURRENCIES))],
               ["amount", "from_currency", "to_currency"]),
        _sample_currency)
    add(schema("get_stock_price", "Get the latest price of a stock.",
               [("symbol", prop("string", "Ticker symbol.", pattern="^[A-Z]{1,5}$"))],
               ["symbol"]),
        lambda r: _q1(r, "symbol", r.choice(STOCKS), [
            "how is {v} doing today?", "price of {v}", "{v} stock", "what's {v} trading at",
            "check {v} for me 📈"]))
    add(schema("calculate", "Evaluate an arithmetic expression.",
               [("expression", prop("string"))], ["expression"]),
        _sample_calc)
    # notes and lists ---------------------------------------------------------------------
    add(schema("add_to_list", "Add an item to a shopping or to-do list.",
               [("item", prop("string")), ("list_name", prop("string", enum=["shopping", "todo", "packing"])),
                ("quantity", prop("integer", minimum=1))],
               ["item"]),
        _sample_list)
    add(schema("create_note", "Save a note.",
               [("text", prop("string", minLength=1))], ["text"]),
        lambda r: _q1(r, "text", r.choice(NOTES), [
            "note: {v}", "make a note to {v}", "remember to {v}", "write down: {v}",
            "save a note saying {v}"]))
    add(schema("set_reminder", "Remind the user about something later.",
               [("text", prop("string")), ("when", prop("string", "ISO 8601 date-time.")),
                ("priority", prop("string", enum=["low", "normal", "high"]))],
               ["text", "when"]),
        _sample_reminder)
    # transport ---------------------------------------------------------------------------
    add(schema("book_ride", "Book a taxi or ride-share.",
               [("pickup", prop("string")), ("dropoff", prop("string")),
                ("passengers", prop("integer", minimum=1, maximum=6))],
               ["dropoff"]),
        _sample_ride)
    add(schema("check_flight", "Get the status of a flight.",
               [("flight_number", prop("string", pattern="^[A-Z0-9]{2}[0-9]{1,4}$")),
                ("date", prop("string"))],
               ["flight_number"]),
        _sample_flight)
    # device ------------------------------------------------------------------------------
    add(schema("toggle_setting", None,
               [("setting", prop("string", enum=["wifi", "bluetooth", "airplane_mode", "do_not_disturb",
                                                 "flashlight", "dark_mode"])),
                ("enabled", prop("boolean"))],
               ["setting", "enabled"]),
        _sample_setting)
    add(schema("take_photo", "Open the camera and take a picture.",
               [("camera", prop("string", enum=["front", "back"])), ("timer_seconds", prop("integer", enum=[0, 3, 10]))],
               []),
        _sample_photo)
    add(schema("log_workout", "Record a workout.",
               [("activity", prop("string")), ("minutes", prop("integer", minimum=1)),
                ("distance_km", prop("number", minimum=0, multipleOf=0.01))],
               ["activity", "minutes"]),
        _sample_workout)
    return tools


def _q1(r, key, value, templates):
    query = r.choice(templates).format(v=value)
    return query, {key: value}, f"{_lit(value)} -> {key}"


def _lit(v):
    if isinstance(v, str):
        return f"'{v}'"
    return dumps(v)


def _rs(pairs):
    return "\n".join(f"{_lit(v)} -> {k}" for k, v in pairs)


def _sample_forecast(r):
    city = r.choice(CITIES)
    days = r.choice([1, 2, 3, 5, 7, 10, 14])
    args = {"city": city, "days": days}
    q = r.choice(["forecast for {c} for the next {d} days", "{d}-day forecast {c}",
                  "will it be sunny in {c} over the next {d} days?",
                  "Météo à {c} pour les {d} prochains jours", "прогноз погоды в {c} на {d} дней"])
    if r.random() < 0.35:
        units = r.choice(["celsius", "fahrenheit"])
        args["units"] = units
        q += f" in {units}"
    return q.format(c=city, d=days), args, _rs(args.items())


def _sample_timer(r):
    m = r.choice([1, 2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 45, 60, 90])
    args = {"minutes": m}
    label = r.choice([None, None, "pasta", "eggs", "laundry", "tea", "pizza 🍕", "naan", "ramen"])
    if label:
        args["label"] = label
        q = r.choice(["set a {m} minute timer for the {l}", "{l} timer {m} min",
                      "timer for {l}, {m} minutes"]).format(m=m, l=label)
    else:
        q = r.choice(["set a timer for {m} minutes", "{m} min timer", "countdown {m} minutes",
                      "minuteur de {m} minutes", "Timer auf {m} Minuten", "{m}分のタイマー"]).format(m=m)
    return q, args, _rs(args.items())


def _sample_alarm(r):
    h, mnt = r.randrange(4, 23), r.choice([0, 0, 15, 30, 45, 5, 50])
    t = f"{h:02d}:{mnt:02d}"
    args = {"time": t}
    spoken = f"{h % 12 or 12}:{mnt:02d} {'am' if h < 12 else 'pm'}" if mnt else f"{h % 12 or 12} {'am' if h < 12 else 'pm'}"
    q = r.choice(["wake me up at {s}", "set an alarm for {s}", "alarm {s}", "réveille-moi à {t}"]).format(s=spoken, t=t)
    if r.random() < 0.3:
        days = r.sample(WEEKDAYS, r.randrange(1, 4))
        args["days"] = days
        q += " on " + " and ".join(days)
    return q, args, _rs(args.items())


def _sample_message(r):
    who = r.choice(FIRST_NAMES)
    msg = r.choice(MESSAGES)
    q = r.choice(["text {w} {m}", "tell {w} \"{m}\"", "send {w} a message saying {m}",
                  "message {w}: {m}", "let {w} know {m}", "écris à {w} : {m}"]).format(w=who, m=msg)
    args = {"recipient": who, "message": msg}
    return q, args, _rs(args.items())


def _ascii_handle(name):
    out = unicodedata.normalize("NFKD", name.lower())
    out = "".join(ch for ch in out if ch.isascii() and ch.isalnum())
    return out or "contact"


def _sample_email(r):
    first, last = r.choice(FIRST_NAMES), r.choice(LAST_NAMES)
    addr = f"{_ascii_handle(first)}.{_ascii_handle(last)}@{r.choice(['example.com', 'mail.test', 'uni.edu', 'firma.de'])}"
    subj = r.choice(SUBJECTS)
    body = r.choice(MESSAGES)
    args = {"to": addr, "subject": subj, "body": body}
    q = f"email {addr} with subject \"{subj}\" and say {body}"
    if r.random() < 0.2:
        cc = f"{_ascii_handle(r.choice(FIRST_NAMES))}@example.com"
        args["cc"] = [cc]
        q += f", cc {cc}"
    return q, args, _rs(args.items())


def _sample_call(r):
    who = r.choice(FIRST_NAMES) + r.choice(["", "", " " + r.choice(LAST_NAMES)])
    args = {"name": who}
    q = r.choice(["call {w}", "ring {w}", "phone {w} please", "appelle {w}", "ruf {w} an",
                  "позвони {w}", "{w}に電話して"]).format(w=who)
    if r.random() < 0.3:
        args["speaker"] = True
        q += " on speaker"
    return q, args, _rs(args.items())


def _date(r):
    y = r.choice([2024, 2025, 2026])
    mo = r.randrange(1, 13)
    d = r.randrange(1, 29)
    return y, mo, d, f"{y:04d}-{mo:02d}-{d:02d}"


def _sample_event(r):
    y, mo, d, iso = _date(r)
    title = r.choice(["dentist", "team sync", "yoga", "dinner with " + r.choice(FIRST_NAMES),
                      "Sprint review", "Elternabend", "réunion budget", "代表者会議", "1:1"])
    h = r.randrange(7, 21)
    start = f"{h:02d}:{r.choice([0, 15, 30, 45]):02d}"
    args = {"title": title, "date": iso, "start": start}
    q = f"schedule {title} on {MONTHS[mo - 1]} {d} at {start}"
    if r.random() < 0.4:
        dur = r.choice([15, 30, 45, 60, 90, 120])
        args["duration_minutes"] = dur
        q += f" for {dur} minutes"
    if r.random() < 0.25:
        people = r.sample(FIRST_NAMES, 2)
        args["attendees"] = people
        q += f" with {people[0]} and {people[1]}"
    return q, args, _rs(args.items())


def _sample_list_events(r):
    y, mo, d, iso = _date(r)
    q = r.choice(["what's on my calendar on {m} {d}?", "am I free on {m} {d} {y}?",
                  "agenda for {iso}", "events {iso}"]).format(m=MONTHS[mo - 1], d=d, y=y, iso=iso)
    return q, {"date": iso}, f"'{iso}' -> date"


def _sample_music(r):
    if r.random() < 0.5:
        what = r.choice(SONGS)
    else:
        what = r.choice(ARTISTS)
    args = {"query": what}
    q = r.choice(["play {w}", "put on {w}", "I want to hear {w}", "spiel {w}", "mets {w}",
                  "включи {w}", "{w}を再生して", "play some {w} 🎵"]).format(w=what)
    if r.random() < 0.25:
        args["shuffle"] = True
        q += " on shuffle"
    if r.random() < 0.2:
        v = r.choice([20, 35, 50, 80])
        args["volume"] = v
        q += f" at volume {v}"
    return q, args, _rs(args.items())


def _sample_device(r):
    dev = r.choice(DEVICES)
    state = r.choice(["on", "off"])
    args = {"device": dev}
    if r.random() < 0.6:
        room = r.choice(ROOMS)
        args["room"] = room
        q = r.choice(["turn {s} the {d} in the {r}", "switch the {r} {d} {s}", "{r} {d} {s}"]).format(s=state, d=dev, r=room)
    else:
        q = r.choice(["turn {s} the {d}", "{d} {s}", "can you switch the {d} {s}?"]).format(s=state, d=dev)
    args["state"] = state
    return q, args, _rs(args.items())


def _sample_thermostat(r):
    t = r.choice([18, 19, 20, 20.5, 21, 21.5, 22, 23, 24, 16.5])
    args = {"temperature": t}
    q = r.choice(["set the heating to {t} degrees", "make it {t}°C", "thermostat {t}",
                  "mets le chauffage à {t} degrés", "Heizung auf {t} Grad"]).format(t=t)
    if r.random() < 0.4:
        room = r.choice(ROOMS)
        args["room"] = room
        q += f" in the {room}"
    return q, args, _rs(args.items())


def _sample_directions(r):
    a, b = r.sample(CITIES, 2)
    args = {}
    if r.random() < 0.5:
        args["origin"] = a
        q = f"how do I get from {a} to {b}"
    else:
        q = r.choice(["directions to {b}", "navigate to {b}", "take me to {b}", "route to {b}",
                      "itinéraire vers {b}", "как доехать до {b}"]).format(b=b)
    args["destination"] = b
    if r.random() < 0.4:
        mode = r.choice(["driving", "walking", "transit", "cycling"])
        args["mode"] = mode
        q += f" by {mode}" if mode != "transit" else " by public transport"
    return q, args, _rs(args.items())


def _sample_places(r):
    what = r.choice(["pharmacy", "coffee", "sushi", "petrol station", "ATM", "vegan food",
                     "boulangerie", "ramen", "bookshop", "EV charger", "playground", "gym"])
    args = {"query": what}
    q = r.choice(["find {w} near me", "where's the nearest {w}", "any {w} around here?",
                  "{w} nearby"]).format(w=what)
    if r.random() < 0.35:
        args["open_now"] = True
        q += " that's open now"
    if r.random() < 0.2:
        n = r.choice([3, 5, 10])
        args["max_results"] = n
        q = f"top {n} " + q
    return q, args, _rs(args.items())


def _sample_translate(r):
    lang, code = r.choice(LANGUAGES)
    text = r.choice(PHRASES)
    q = r.choice(["translate \"{t}\" to {l}", "how do you say {t} in {l}?", "{l} for '{t}'",
                  "in {l}: {t}"]).format(t=text, l=lang)
    args = {"text": text, "target_language": code}
    return q, args, f"'{text}' -> text\n'{lang}' -> target_language '{code}'"


def _sample_search(r):
    topic = r.choice(TOPICS + ["best pizza in " + r.choice(CITIES), "how tall is Kilimanjaro",
                               "Φιλοσοφία του Αριστοτέλη", "рецепт борща", "東京タワー 高さ",
                               "why is the sky blue", "python 3.12 release notes"])
    return _q1(r, "query", topic, ["search for {v}", "look up {v}", "google {v}",
                                   "find info on {v}", "{v}?"])


def _sample_news(r):
    args = {}
    if r.random() < 0.7:
        topic = r.choice(TOPICS)
        args["topic"] = topic
        q = r.choice(["news about {t}", "what's new with {t}", "latest on {t}",
                      "headlines {t}"]).format(t=topic)
    else:
        q = r.choice(["what's in the news", "today's headlines", "any news?", "actualités"])
    if r.random() < 0.3:
        n = r.choice([3, 5, 10])
        args["count"] = n
        q = f"top {n} " + q
    return q, args, _rs(args.items())


def _sample_currency(r):
    a, b = r.sample(CURRENCIES, 2)
    amt = r.choice([5, 10, 20, 49.99, 100, 250, 1000, 1e6, 0.5, 12.75, 3000])
    q = r.choice(["convert {n} {a} to {b}", "how much is {n} {aw} in {bw}?",
                  "{n} {a} in {b}", "what are {n} {aw} worth in {bw}"]).format(
        n=amt, a=a, b=b, aw=CURRENCY_WORDS[a], bw=CURRENCY_WORDS[b])
    args = {"amount": amt, "from_currency": a, "to_currency": b}
    return q, args, _rs(args.items())


def _sample_calc(r):
    a, b = r.randrange(2, 5000), r.randrange(2, 300)
    op, word = r.choice([("+", "plus"), ("-", "minus"), ("*", "times"), ("/", "divided by")])
    expr = f"{a} {op} {b}"
    q = r.choice([f"what's {a} {word} {b}", f"calculate {expr}", f"{a}{op}{b}=?",
                  f"compute {a} {word} {b}"])
    if r.random() < 0.2:
        expr = f"{a} * {r.randrange(1, 40)} / 100"
        q = f"what is {expr.split(' * ')[1].split(' /')[0]}% of {a}"
    return q, {"expression": expr}, f"'{expr}' -> expression"


def _sample_list(r):
    item = r.choice(ITEMS)
    args = {"item": item}
    q = r.choice(["add {i} to my shopping list", "we need {i}", "put {i} on the list",
                  "ajoute {i} à la liste", "{i} auf die Einkaufsliste"]).format(i=item)
    if r.random() < 0.6:
        args["list_name"] = "shopping"
    if r.random() < 0.25:
        n = r.choice([2, 3, 4, 6, 12])
        args["quantity"] = n
        q += f", {n} of them"
    return q, args, _rs(args.items())


def _sample_reminder(r):
    y, mo, d, iso = _date(r)
    h = r.randrange(6, 22)
    when = f"{iso}T{h:02d}:00:00"
    text = r.choice(NOTES)
    args = {"text": text, "when": when}
    q = f"remind me to {text} on {MONTHS[mo - 1]} {d} at {h}:00"
    if r.random() < 0.3:
        args["priority"] = "high"
        q = "important: " + q
    return q, args, _rs(args.items())


def _sample_ride(r):
    dst = r.choice(["the airport", "home", "work", "Central Station", "Gare du Nord",
                    "Hauptbahnhof", "Shibuya", "Ikeja City Mall", "the stadium"])
    args = {}
    q = f"get me a taxi to {dst}"
    if r.random() < 0.3:
        src = r.choice(["home", "the office", "the hotel", "Terminal 2"])
        args["pickup"] = src
        q = f"book a ride from {src} to {dst}"
    args["dropoff"] = dst
    if r.random() < 0.3:
        p = r.choice([2, 3, 4])
        args["passengers"] = p
        q += f" for {p} people"
    return q, args, _rs(args.items())


def _sample_flight(r):
    fn = r.choice(["BA", "LH", "AF", "KL", "W3", "ET", "NH", "KE", "LA", "QF", "UA"]) + str(r.randrange(1, 3000))
    args = {"flight_number": fn}
    q = r.choice(["is {f} on time?", "status of flight {f}", "when does {f} land",
                  "check {f} ✈️"]).format(f=fn)
    if r.random() < 0.3:
        _, _, _, iso = _date(r)
        args["date"] = iso
        q += f" on {iso}"
    return q, args, _rs(args.items())


def _sample_setting(r):
    setting = r.choice(["wifi", "bluetooth", "airplane_mode", "do_not_disturb", "flashlight", "dark_mode"])
    on = r.random() < 0.5
    spoken = setting.replace("_", " ")
    q = r.choice(["turn {o} {s}", "{s} {o}", "switch {s} {o} please"]).format(o="on" if on else "off", s=spoken)
    args = {"setting": setting, "enabled": on}
    return q, args, _rs(args.items())


def _sample_photo(r):
    args = {}
    q = r.choice(["take a picture", "snap a photo", "cheese! 📸", "prends une photo"])
    if r.random() < 0.5:
        args["camera"] = "front"
        q = "take a selfie"
    if r.random() < 0.3:
        args["timer_seconds"] = r.choice([3, 10])
        q += f" with a {args['timer_seconds']} second timer"
    return q, args, _rs(args.items())


def _sample_workout(r):
    act = r.choice(["running", "cycling", "swimming", "yoga", "walking", "rowing", "hiking"])
    mins = r.choice([15, 20, 30, 45, 60, 75, 90])
    args = {"activity": act, "minutes": mins}
    q = f"log {mins} minutes of {act}"
    if act in ("running", "cycling", "walking", "hiking", "rowing") and r.random() < 0.5:
        km = round(r.uniform(1, 40), 2)
        args["distance_km"] = km
        q += f", {km} km"
    return q, args, _rs(args.items())


OFF_TOPIC = [
    "tell me a joke", "who are you?", "what's the meaning of life", "I'm bored",
    "thanks!", "good night 🌙", "how are you today?", "you're awesome", "sing me a song",
    "what's your favourite colour?", "merci beaucoup", "danke schön", "¿cómo estás?",
    "спасибо", "ありがとう", "고마워요", "谢谢你", "Ευχαριστώ πολύ", "hmm", "ok", "lol 😂",
    "can you keep a secret?", "write a haiku about autumn", "is a hot dog a sandwich?",
]


def render_prompt(system, tools_json, query):
    out = []
    if system.strip():
        out.append(f"<|im_start|>system\n{system.strip()}<|im_end|>\n")
    out.append(f"<|im_start|>user\n<tools>{tools_json}</tools>\n{query}<|im_end|>\n<|im_start|>assistant\n")
    return "".join(out)


def render_target(reasoning, answers_json):
    out = []
    if reasoning.strip():
        out.append(f"<think>\n{reasoning.strip()}\n</think>\n")
    out.append(f"<tool_call>{answers_json}</tool_call><|im_end|>")
    return "".join(out)


def make_system(r):
    if r.random() < 0.55:
        return ""
    y, mo, d, iso = _date(r)
    facts = [f"date: {iso} {r.choice(['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'])} {r.randrange(0, 24):02d}:{r.choice([0, 15, 30, 45]):02d}"]
    for key, values in r.sample(SYSTEM_FACTS, r.randrange(0, 4)):
        facts.append(f"{key}: {r.choice(values)}")
    return "; ".join(facts)


def make_transcript(r, tools):
    n_tools = r.choice([1, 1, 2, 2, 3, 3, 4, 5])
    chosen = r.sample(tools, n_tools)
    system = make_system(r)
    roll = r.random()
    if roll < 0.1:
        query, calls, reasoning = r.choice(OFF_TOPIC), [], ""
    elif roll < 0.2 and n_tools >= 2:
        (s1, f1), (s2, f2) = chosen[0], chosen[1]
        q1, a1, r1 = f1(r)
        q2, a2, r2 = f2(r)
        query = f"{q1} {r.choice(['and', 'and also', 'then', '&', 'et'])} {q2}"
        calls = [{"name": s1["name"], "arguments": a1}, {"name": s2["name"], "arguments": a2}]
        reasoning = "\n".join(x for x in (r1, r2) if x)
    else:
        sch, sampler = r.choice(chosen)
        query, args, reasoning = sampler(r)
        calls = [{"name": sch["name"], "arguments": args}]
    if r.random() < 0.08:
        query = query + " " + r.choice(EMOJI)
    if r.random() < 0.1:
        query = query[:1].upper() + query[1:]
    if r.random() < 0.25:
        reasoning = ""
    tools_json = dumps([s for s, _ in chosen])
    return render_prompt(system, tools_json, query) + render_target(reasoning, dumps(calls))


# --------------------------------------------------------------------------- free text

FREE_TEXT = {
    "en": ["The quick brown fox jumps over the lazy dog.", "Numbers like 3.14159, 2,718 and 1e-05 show up in logs.",
           "She said: \"don't forget the keys\" — then left.", "Tabs\tand  double  spaces are kept as they are.",
           "Meet me at 10:45 on platform 9¾.", "Prices rose 4.5% year-on-year (see table 2).",
           "Open-source firmware runs on tiny micro-controllers.", "A naïve café owner re-élected the coördinator."],
    "fr": ["Le cœur a ses raisons que la raison ne connaît point.", "Où est la bibliothèque ? Elle ferme à 18 h.",
           "Ça coûte 12,50 € — c'est déjà ça !"],
    "de": ["Grüße aus Köln, die Straße ist gesperrt.", "Fünf Brötchen und ein Kännchen Kaffee, bitte."],
    "es": ["¿Dónde está el baño? ¡Muchas gracias, señor!", "El niño comió piña en la montaña."],
    "pt": ["Não há nada como um pão de queijo quentinho.", "Ação, coração e informação."],
    "pl": ["Zażółć gęślą jaźń.", "Dzień dobry, poproszę kawę."],
    "tr": ["Iğdır'da ağaçlar çiçek açtı.", "Günaydın, nasılsınız?"],
    "vi": ["Tiếng Việt có nhiều dấu thanh.", "Cảm ơn bạn rất nhiều."],
    "el": ["Καλημέρα, τι κάνεις σήμερα;", "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.", "Ευχαριστώ για τη βοήθεια."],
    "ru": ["Съешь же ещё этих мягких французских булок, да выпей чаю.", "Москва — столица России.",
           "Сегодня хорошая погода."],
    "uk": ["Доброго ранку, як справи?", "Київ стоїть на Дніпрі."],
    "ja": ["今日はいい天気ですね。", "東京駅までどうやって行きますか？", "ありがとうございます。"],
    "zh": ["今天天气很好。", "我想喝一杯咖啡。", "北京是中国的首都。"],
    "ko": ["안녕하세요, 만나서 반갑습니다.", "오늘 날씨가 좋네요."],
    "emoji": ["Party tonight 🎉🎉 bring snacks 🍕🥤", "Running late 🏃‍♀️💨 sorry!", "Flags: 🇳🇬 🇯🇵 🇫🇷 🇧🇷",
              "Love it ❤️👍", "Weather: ☀️ then 🌧️", "Coder at work 👩🏽‍💻"],
}


def make_free_text(r):
    lang = r.choice(list(FREE_TEXT))
    n = r.randrange(1, 4)
    parts = [r.choice(FREE_TEXT[lang]) for _ in range(n)]
    return " ".join(parts)


def make_transcripts() -> str:
    r = random.Random(SEED)
    tools = build_tools()
    records = []
    for i in range(N_TRANSCRIPTS):
        records.append(make_transcript(r, tools))
        if i % 4 == 3:
            records.append(make_free_text(r))
    for rec in records:
        assert "\n\n" not in rec and rec.strip(), rec
    return "\n\n".join(records) + "\n"


def make_pydoc_topics() -> str:
    from pydoc_data import topics

    seen = set()
    parts = []
    for key in sorted(topics.topics):
        text = topics.topics[key].strip("\n")
        if text in seen:
            continue
        seen.add(text)
        parts.append(text)
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--with-pydoc-topics", action="store_true",
                    help="also (re)extract pydoc_topics.txt from this interpreter")
    ap.add_argument("--out", type=Path, default=CORPUS_DIR)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    text = make_transcripts()
    (args.out / TRANSCRIPT_FILE).write_bytes(text.encode("utf-8"))
    print(f"wrote {args.out / TRANSCRIPT_FILE}: {len(text.encode('utf-8'))} bytes")
    if args.with_pydoc_topics:
        text = make_pydoc_topics()
        (args.out / PYDOC_FILE).write_bytes(text.encode("utf-8"))
        print(f"wrote {args.out / PYDOC_FILE}: {len(text.encode('utf-8'))} bytes "
              f"(from Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
