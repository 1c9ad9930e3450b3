"""The security part of the metadata image: ACLs and SCRAM credentials, from their records.

    AccessControlEntryRecord        {id, resource_type, resource_name, pattern_type, principal,
                                     host, operation, permission_type}     (KRaft key 18)
    RemoveAccessControlEntryRecord  {id}                                    (key 19)
    UserScramCredentialRecord       {name, mechanism, salt, stored_key, server_key, iterations}
                                    (key 11; bytes as base64; mechanism 1 = SHA-256, 2 = SHA-512)
    RemoveUserScramCredentialRecord {name, mechanism}                       (key 22)
Sans-IO: `apply` is the only way it changes.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field

from reference.security.acls import AclBinding
from reference.security.scram import MECHANISM_BY_CODE, MECHANISMS, ScramCredential

RECORD_TYPES = frozenset({"AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
                          "UserScramCredentialRecord", "RemoveUserScramCredentialRecord"})


@dataclass
class SecurityImage:
    acls: dict[str, AclBinding] = field(default_factory=dict)  # by the record's id
    scram_credentials: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)  # (user, mechanism)

    def apply(self, record: dict) -> None:
        kind = record["type"]
        if kind == "AccessControlEntryRecord":
            assert record["id"] not in self.acls, record
            self.acls[record["id"]] = AclBinding.from_record(record)
        elif kind == "RemoveAccessControlEntryRecord":
            del self.acls[record["id"]]
        elif kind == "UserScramCredentialRecord":
            self.scram_credentials[(record["name"], MECHANISM_BY_CODE[record["mechanism"]])] = ScramCredential(
                *(base64.b64decode(record[key]) for key in ("salt", "stored_key", "server_key")), record["iterations"])
        else:
            del self.scram_credentials[(record["name"], MECHANISM_BY_CODE[record["mechanism"]])]

    def acl_id(self, binding: AclBinding) -> str | None:
        return next((acl_id for acl_id, acl in self.acls.items() if acl == binding), None)


def scram_credential_record(user: str, mechanism: str, credential: ScramCredential) -> dict:
    return {"type": "UserScramCredentialRecord", "name": user, "mechanism": MECHANISMS[mechanism][1],
            "salt": base64.b64encode(credential.salt).decode(),
            "stored_key": base64.b64encode(credential.stored_key).decode(),
            "server_key": base64.b64encode(credential.server_key).decode(), "iterations": credential.iterations}


def remove_scram_credential_record(user: str, mechanism: str) -> dict:
    return {"type": "RemoveUserScramCredentialRecord", "name": user, "mechanism": MECHANISMS[mechanism][1]}
