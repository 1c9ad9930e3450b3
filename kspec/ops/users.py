"""`kspec users`: SCRAM credentials (KIP-554), as `kafka-configs.sh --entity-type users` manages them.

    kspec users create carol -b HOST:PORT --command-config admin.properties --password S3cret \\
        [--mechanism SCRAM-SHA-256] [--iterations 8192]
    kspec users describe [carol ...] -b HOST:PORT --command-config admin.properties
    kspec users delete carol -b HOST:PORT --command-config admin.properties [--mechanism SCRAM-SHA-512]

The client salts and hashes the password (confluent-kafka's AlterUserScramCredentials); the
broker stores StoredKey and ServerKey, never the password.
"""
from __future__ import annotations

import click
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from kspec.ops.common import (EXIT_CODES_EPILOG, ConnectionWatch, OpsGroup, await_metadata, bootstrap_option,
                              client_config, print_table, result)

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
ITERATIONS_MIN, ITERATIONS_MAX = 4096, 16384  # what Kafka's controller accepts
mechanism_option = click.option("--mechanism", type=click.Choice(list(MECHANISMS), case_sensitive=False),
                                default="SCRAM-SHA-256", show_default=True, help="The SCRAM mechanism.")


def connect(bootstrap: str) -> AdminClient:
    watch = ConnectionWatch()
    admin = AdminClient(client_config(bootstrap, watch))
    await_metadata(admin, watch, bootstrap)
    return admin


@click.group(cls=OpsGroup, epilog=EXIT_CODES_EPILOG)
def users() -> None:
    """Create, describe and delete SCRAM users.

    \b
    Examples:
      kspec users create carol -b 127.0.0.1:9093 --command-config admin.properties --password S3cret
      kspec users describe -b 127.0.0.1:9093 --command-config admin.properties
      kspec users delete carol -b 127.0.0.1:9093 --command-config admin.properties
    """


@users.command(epilog=EXIT_CODES_EPILOG)
@click.argument("user")
@bootstrap_option
@click.option("--password", required=True, envvar="KSPEC_SCRAM_PASSWORD", help="The password (or KSPEC_SCRAM_PASSWORD).")
@mechanism_option
@click.option("--iterations", type=click.IntRange(ITERATIONS_MIN, ITERATIONS_MAX), default=ITERATIONS_MIN,
              show_default=True, help="PBKDF2 iterations.")
def create(user: str, bootstrap: str, password: str, mechanism: str, iterations: int) -> None:
    """Create USER's SCRAM credential, or replace it."""
    admin = connect(bootstrap)
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[mechanism.upper()], iterations),
                                          password.encode())
    result(f"cannot set {mechanism.upper()} credentials of {user!r}", admin.alter_user_scram_credentials([upsert])[user])
    click.echo(f"Set {mechanism.upper()} credentials of user {user}.")


@users.command(epilog=EXIT_CODES_EPILOG)
@click.argument("names", nargs=-1, metavar="[USER]...")
@bootstrap_option
def describe(names: tuple[str, ...], bootstrap: str) -> None:
    """Show the SCRAM mechanisms and iterations of USERs (default: every user)."""
    admin = connect(bootstrap)
    if names:
        described = {name: result(f"cannot describe user {name!r}", future)
                     for name, future in admin.describe_user_scram_credentials(list(names)).items()}
    else:
        described = result("cannot describe users", admin.describe_user_scram_credentials())
    rows = [[name, info.mechanism.name.replace("_", "-"), info.iterations]
            for name, description in sorted(described.items()) for info in description.scram_credential_infos]
    print_table(["USER", "MECHANISM", "ITERATIONS"], rows)


@users.command(epilog=EXIT_CODES_EPILOG)
@click.argument("user")
@bootstrap_option
@mechanism_option
def delete(user: str, bootstrap: str, mechanism: str) -> None:
    """Delete USER's credential for one mechanism."""
    admin = connect(bootstrap)
    deletion = UserScramCredentialDeletion(user, MECHANISMS[mechanism.upper()])
    result(f"cannot delete {mechanism.upper()} credentials of {user!r}",
           admin.alter_user_scram_credentials([deletion])[user])
    click.echo(f"Deleted {mechanism.upper()} credentials of user {user}.")
