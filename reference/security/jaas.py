"""JAAS configuration as Kafka's broker reads it (`sasl.jaas.config`, Kafka's JaasConfig).

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

One login module: its class, a control flag (required, requisite, sufficient, optional), options
`key=value` (values quoted, or bare words; a bare number is refused as Kafka refuses it) and a
closing `;`. `//` and `/* */` comments are allowed. Errors are ValueError with one line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

_TOKEN = re.compile(r'''\s*(?:(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<quoted>"(?:\\.|[^"\\])*")|(?P<word>[^\s=;"]+)|(?P<symbol>[=;]))''',
                    re.S)


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> LoginModule:
    """The one login module of a `sasl.jaas.config` value; ValueError saying what is wrong."""
    tokens = _tokens(text, key)
    if len(tokens) < 3:
        raise ValueError(f"{key}: expected 'LoginModuleClass required key=\"value\" ... ;', got {text!r}")
    (class_kind, class_name), (flag_kind, flag) = tokens[0], tokens[1]
    if class_kind != "word" or flag_kind != "word" or flag.lower() not in CONTROL_FLAGS:
        raise ValueError(f"{key}: expected a login module class and a control flag ({', '.join(CONTROL_FLAGS)}), "
                         f"got {class_name!r} {flag!r}")
    options: dict[str, str] = {}
    position = 2
    while position < len(tokens) and tokens[position] != ("symbol", ";"):
        if position + 2 >= len(tokens) or tokens[position][0] != "word" or tokens[position + 1] != ("symbol", "="):
            raise ValueError(f"{key}: expected option key=\"value\" after {tokens[position - 1][1]!r}")
        name, (value_kind, value) = tokens[position][1], tokens[position + 2]
        if value_kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif value_kind != "word" or value.isdigit():
            raise ValueError(f"{key}: the value of option {name!r} must be quoted, e.g. {name}=\"{value}\"")
        options[name] = value
        position += 3
    if position >= len(tokens):
        raise ValueError(f"{key}: the login module entry must end with ';'")
    if position + 1 != len(tokens):
        raise ValueError(f"{key}: exactly one login module is allowed, found more after ';'")
    return LoginModule(class_name, flag.lower(), options)


def _tokens(text: str, key: str) -> list[tuple[str, str]]:
    tokens = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(f"{key}: cannot parse {text[position:position + 20]!r}")
        position = match.end()
        if match.lastgroup != "comment":
            tokens.append((match.lastgroup, match.group(match.lastgroup)))
    return tokens
