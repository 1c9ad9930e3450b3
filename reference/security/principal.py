"""Who a connection is: a KafkaPrincipal, from TLS client certificates or SASL.

Kafka's DefaultKafkaPrincipalBuilder: a PLAINTEXT connection, or an SSL one without a client
certificate, is `User:ANONYMOUS`; an SSL connection with a client certificate is `User:` plus
the certificate's subject in RFC 2253 form, rewritten by `ssl.principal.mapping.rules`
(KIP-371); a SASL connection is `User:` plus the authenticated name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """'User:alice' -> KafkaPrincipal('User', 'alice'); ValueError without a type."""
        principal_type, sep, name = text.strip().partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"principal {text!r} is not TYPE:NAME, e.g. User:alice")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")

# Attribute names as X500Principal.getName(RFC2253) spells them; others keep Python's name.
_ATTRIBUTE_KEYWORDS = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}


def rfc2253_subject(subject: tuple) -> str:
    """ssl.SSLSocket.getpeercert()['subject'] (RDNs in certificate order) -> 'CN=alice,OU=x,O=y'
    (RFC 2253 lists the RDNs last first)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_ATTRIBUTE_KEYWORDS.get(key, key)}={_escape(value)}" for key, value in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: the DEFAULT rule, the whole name unchanged
    replacement: str = ""
    case: str = ""  # "L" lower-cases the result, "U" upper-cases it

    def apply(self, distinguished_name: str) -> str | None:
        if self.pattern is None:
            return distinguished_name
        match = self.pattern.fullmatch(distinguished_name)
        if match is None:
            return None
        result = match.expand(re.sub(r"\$(\d+)", r"\\g<\1>", self.replacement))
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


class SslPrincipalMapper:
    """ssl.principal.mapping.rules: `DEFAULT` or `RULE:pattern/replacement/[LU]`, comma-separated,
    tried in order; the first rule whose pattern matches the whole subject names the user."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        position = 0
        rules = rules.strip()
        while position < len(rules):
            match = _RULE.match(rules, position)
            if match is None or match.end() == position:
                raise ValueError(f"ssl.principal.mapping.rules: cannot parse {rules[position:]!r}; "
                                 "write DEFAULT or RULE:pattern/replacement/[LU]")
            if match.group(1):
                self.rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(match.group(2).replace("\\/", "/"))
                except re.error as e:
                    raise ValueError(f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {e}") from None
                self.rules.append(_Rule(pattern, match.group(3).replace("\\/", "/"), match.group(4)))
            position = match.end()
        if not self.rules:
            self.rules.append(_Rule(None))

    def principal(self, distinguished_name: str) -> KafkaPrincipal:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return KafkaPrincipal(USER_TYPE, name)
        raise ValueError(f"no ssl.principal.mapping.rules rule applies to {distinguished_name!r}")
