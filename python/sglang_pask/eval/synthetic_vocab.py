"""Word lists and parameter templates for the synthetic generator (synthetic.py).

A parameter template says how a value is drawn, how the query mentions it (``syn``: the words the
query uses, never the parameter's own name when the generator's ``synonyms`` knob fires) and how
its doc describes it. Kinds: str_place, str_person, str_code, int, float, bool, enum, array_str,
array_int, object.
"""

from __future__ import annotations

VERBS = ("get", "book", "cancel", "find", "create", "update", "list", "send", "check", "track", "convert", "search")
NOUNS = (
    "flight",
    "hotel",
    "weather",
    "order",
    "invoice",
    "playlist",
    "ticket",
    "recipe",
    "account",
    "parcel",
    "meeting",
    "stock",
)
NAMESPACES = ("travel", "shop", "media", "office", "finance", "home")

PLACES = (
    "Paris",
    "Rome",
    "Oslo",
    "Lima",
    "Cairo",
    "Tokyo",
    "Delhi",
    "Berlin",
    "Madrid",
    "Seoul",
    "Quito",
    "Dakar",
    "Austin",
    "Perth",
    "Nairobi",
    "Bergen",
    "Porto",
    "Havana",
    "Kyoto",
    "Zurich",
)
PERSONS = (
    "Alice",
    "Bruno",
    "Carla",
    "Dmitri",
    "Emma",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
)
WORDS = (
    "red",
    "blue",
    "green",
    "amber",
    "violet",
    "urgent",
    "draft",
    "final",
    "home",
    "work",
    "travel",
    "family",
    "north",
    "south",
    "gold",
    "silver",
)
FILLER = (
    "This endpoint is rate limited and results may be cached for a short while.",
    "It returns a structured record that downstream services can consume directly.",
    "Use it only when the user has asked for this exact operation.",
    "All values are validated on the server and invalid ones are rejected with an error.",
    "The operation is idempotent, so repeating it with the same arguments is safe.",
    "Times are interpreted in the local time zone of the service.",
)

# name, kind, query synonyms, description, extra (enum literals / object fields / bool phrases)
PARAMS = (
    ("city", "str_place", ("town", "location"), "Name of the city where the operation applies.", None),
    ("destination", "str_place", ("going to", "arriving in"), "City the traveller goes to.", None),
    ("origin", "str_place", ("leaving from", "departing"), "City the traveller starts from.", None),
    ("recipient", "str_person", ("addressed to", "for"), "Full name of the person who receives it.", None),
    ("owner", "str_person", ("held by", "belonging to"), "Person who owns the record.", None),
    ("reference", "str_code", ("code", "ref"), "Reference code exactly as issued, for example AB12.", None),
    ("sku", "str_code", ("item code", "product code"), "Stock keeping unit identifier.", None),
    ("quantity", "int", ("count", "how many"), "Number of units, a positive integer.", (1, 40)),
    ("nights", "int", ("stay of", "staying"), "Number of nights.", (1, 21)),
    ("year", "int", ("dated", "vintage"), "Four digit calendar year.", (1990, 2030)),
    ("limit", "int", ("at most", "up to"), "Maximum number of results to return.", (1, 50)),
    ("price", "float", ("cost", "for"), "Price in the account currency, with decimals.", (1.0, 500.0)),
    ("weight", "float", ("weighing", "mass"), "Weight in kilograms.", (0.1, 80.0)),
    ("rating", "float", ("score", "rated"), "Minimum rating between 0 and 5.", (0.5, 5.0)),
    ("express", "bool", ("rush",), "Whether to use express handling.", ("rushed", "not rushed")),
    (
        "refundable",
        "bool",
        ("money back",),
        "Whether the booking must be refundable.",
        ("with money back", "without money back"),
    ),
    ("notify", "bool", ("alert",), "Whether to send a notification.", ("alerting me", "without alerting me")),
    ("unit", "enum", ("in", "using"), "Unit system for the result.", ("celsius", "fahrenheit", "kelvin")),
    ("sort_order", "enum", ("sorted", "ordering"), "Order of the results.", ("ascending", "descending")),
    ("currency", "enum", ("paid in", "money"), "ISO currency of the amounts.", ("USD", "EUR", "JPY", "GBP")),
    ("priority", "enum", ("urgency", "importance"), "Handling priority.", ("low", "normal", "high")),
    ("tags", "array_str", ("labelled", "tagged"), "Labels to attach, in the given order.", None),
    ("seat_numbers", "array_int", ("seats", "places"), "Seat numbers, in the given order.", (1, 60)),
    (
        "dimensions",
        "object",
        ("size", "measuring"),
        "Box dimensions in centimetres.",
        (("width", "int"), ("height", "int")),
    ),
    (
        "window",
        "object",
        ("between hours", "slot"),
        "Delivery window as start and end hour.",
        (("start", "int"), ("end", "int")),
    ),
    (
        "contact",
        "object",
        ("reach", "via"),
        "Who to contact and where.",
        (("name", "str_person"), ("city", "str_place")),
    ),
)

SCHEMA_TYPE = {
    "str_place": "string",
    "str_person": "string",
    "str_code": "string",
    "int": "integer",
    "float": "float",
    "bool": "boolean",
    "enum": "string",
    "array_str": "array",
    "array_int": "array",
    "object": "dict",
}
