"""`kspec acls`: list, add and remove ACLs with kafka-acls.sh's vocabulary.

    kspec acls -b HOST:PORT --command-config admin.properties --add --allow-principal User:alice \\
        --operation Read --operation Write --topic orders
    kspec acls -b HOST:PORT --command-config admin.properties --list [--topic orders | --principal User:alice]
    kspec acls -b HOST:PORT --command-config admin.properties --remove --allow-principal User:alice --topic orders

As kafka-acls.sh: one action (--list, --add, --remove); resources by --topic, --group,
--cluster, --transactional-id (repeatable), with --resource-pattern-type (LITERAL or PREFIXED
for --add; also ANY and MATCH for --list and --remove); principals by --allow-principal and
--deny-principal, hosts by --allow-host and --deny-host (default *); --operation names Kafka's
operations (Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
AlterConfigs, IdempotentWrite, All). --producer and --consumer add the operations a producer or
a consumer needs. Requests go through confluent-kafka's AdminClient (CreateAcls, DescribeAcls,
DeleteAcls).
"""
from __future__ import annotations

import click
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from kspec.ops.common import (EXIT_CODES_EPILOG, BadUsage, ConnectionWatch, OpsCommand, await_metadata,
                              bootstrap_option, client_config, print_table, result)

CLUSTER_NAME = "kafka-cluster"
OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED,
                 "any": ResourcePatternType.ANY, "match": ResourcePatternType.MATCH}
PRODUCER_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)  # kafka-acls.sh --producer
CONSUMER_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE)  # on the topic; READ on the group too


def _operation(ctx, param, values: tuple[str, ...]) -> list[AclOperation]:
    unknown = [v for v in values if v.replace("_", "").replace("-", "").lower() not in OPERATIONS]
    if unknown:
        raise click.BadParameter(f"unknown operation {unknown[0]!r}; use one of Read, Write, Create, Delete, Alter, "
                                 "Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All",
                                 ctx, param)
    return [OPERATIONS[v.replace("_", "").replace("-", "").lower()] for v in values]


def _principal(ctx, param, values: tuple[str, ...]) -> list[str]:
    for value in values:
        kind, sep, name = value.partition(":")
        if not sep or not kind or not name:
            raise click.BadParameter(f"{value!r} is not TYPE:NAME, e.g. User:alice", ctx, param)
    return list(values)


@click.command(cls=OpsCommand, epilog=EXIT_CODES_EPILOG)
@bootstrap_option
@click.option("--list", "action", flag_value="list", help="List ACLs (of the given resources, or all).")
@click.option("--add", "action", flag_value="add", help="Add ACLs.")
@click.option("--remove", "action", flag_value="remove", help="Remove ACLs matching the options.")
@click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic (or * for all).")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="A consumer group (or *).")
@click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID", help="A transactional id (or *).")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option("--resource-pattern-type", "pattern_type", type=click.Choice(list(PATTERN_TYPES), case_sensitive=False),
              help="LITERAL (default for --add) or PREFIXED; ANY (default otherwise) and MATCH filter --list/--remove.")
@click.option("--allow-principal", multiple=True, callback=_principal, metavar="TYPE:NAME", help="e.g. User:alice.")
@click.option("--deny-principal", multiple=True, callback=_principal, metavar="TYPE:NAME", help="e.g. User:bob.")
@click.option("--allow-host", multiple=True, metavar="IP", help="Hosts the allow ACLs hold for (default *).")
@click.option("--deny-host", multiple=True, metavar="IP", help="Hosts the deny ACLs hold for (default *).")
@click.option("--principal", "principals", multiple=True, callback=_principal, metavar="TYPE:NAME",
              help="With --list: only the ACLs of this principal.")
@click.option("--operation", "operations", multiple=True, callback=_operation, metavar="OP",
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                   "IdempotentWrite or All (repeatable).")
@click.option("--producer", is_flag=True, help="The operations a producer needs on --topic.")
@click.option("--consumer", is_flag=True, help="The operations a consumer needs on --topic and --group.")
@click.option("--force", is_flag=True, help="Accepted for kafka-acls.sh compatibility (kspec never prompts).")
def acls(bootstrap: str, action: str | None, topics, groups, transactional_ids, cluster: bool, pattern_type,
         allow_principal, deny_principal, allow_host, deny_host, principals, operations, producer: bool,
         consumer: bool, force: bool) -> None:
    """List, add and remove ACLs (kafka-acls.sh's options).

    \b
    Examples:
      kspec acls -b 127.0.0.1:9093 --command-config admin.properties --add \\
          --allow-principal User:alice --operation Read --operation Write --topic orders
      kspec acls -b 127.0.0.1:9093 --command-config admin.properties --add --consumer \\
          --allow-principal User:bob --topic orders --group billing
      kspec acls -b 127.0.0.1:9093 --command-config admin.properties --list --topic orders
      kspec acls -b 127.0.0.1:9093 --command-config admin.properties --remove --allow-principal User:alice --topic orders
    """
    if action is None:
        raise BadUsage("give one action: --list, --add or --remove (see `kspec acls --help`)")
    pattern = PATTERN_TYPES[(pattern_type or ("literal" if action == "add" else "any")).lower()]
    if action == "add" and pattern not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        raise BadUsage("--add takes --resource-pattern-type LITERAL or PREFIXED")
    resources = ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
                 + [(ResourceType.TRANSACTIONAL_ID, x) for x in transactional_ids]
                 + ([(ResourceType.BROKER, CLUSTER_NAME)] if cluster else []))
    watch = ConnectionWatch()
    admin = AdminClient(client_config(bootstrap, watch))
    await_metadata(admin, watch, bootstrap)
    if action == "list":
        _list(admin, resources, pattern, principals)
        return
    entries = _entries(resources, allow_principal, deny_principal, allow_host, deny_host, operations, producer,
                       consumer, adding=action == "add")
    if action == "add":
        bindings = [AclBinding(kind, name, pattern, principal, host, operation, permission)
                    for kind, name, principal, host, operation, permission in entries]
        for binding, future in admin.create_acls(bindings).items():
            result(f"cannot add {_describe(binding)}", future)
        click.echo(f"Added {len(bindings)} ACL(s).")
        _list(admin, resources, ResourcePatternType.ANY, ())
    else:
        filters = [AclBindingFilter(kind, name, pattern, principal, host, operation, permission)
                   for kind, name, principal, host, operation, permission in entries]
        removed = 0
        for acl_filter, future in admin.delete_acls(filters).items():
            removed += len(result(f"cannot remove ACLs matching {_describe(acl_filter)}", future))
        click.echo(f"Removed {removed} ACL(s).")


def _entries(resources, allow_principals, deny_principals, allow_hosts, deny_hosts, operations, producer, consumer,
             adding: bool) -> list[tuple]:
    """(resource type, name, principal, host, operation, permission) for --add / --remove."""
    if not resources:
        raise BadUsage("name at least one resource: --topic, --group, --transactional-id or --cluster")
    if adding and not (allow_principals or deny_principals):
        raise BadUsage("--add needs --allow-principal or --deny-principal")
    if adding and not (operations or producer or consumer):
        raise BadUsage("--add needs --operation (or --producer / --consumer)")
    wanted = []
    for kind, name in resources:
        ops = list(operations)
        if producer and kind == ResourceType.TOPIC:
            ops += PRODUCER_OPERATIONS
        if consumer:
            ops += CONSUMER_OPERATIONS if kind == ResourceType.TOPIC else [AclOperation.READ] if kind == ResourceType.GROUP else []
        ops = list(dict.fromkeys(ops)) or ([] if adding else [AclOperation.ANY])
        principals = ([(p, AclPermissionType.ALLOW, allow_hosts) for p in allow_principals]
                      + [(p, AclPermissionType.DENY, deny_hosts) for p in deny_principals])
        if not principals and not adding:
            principals = [(None, AclPermissionType.ANY, ())]
        for principal, permission, hosts in principals:
            for host in (hosts or (["*"] if adding else [None])):
                wanted += [(kind, name, principal, host, op, permission) for op in ops]
    if adding and not wanted:
        raise BadUsage("--producer applies to --topic and --consumer to --topic and --group; name one")
    return wanted


def _list(admin: AdminClient, resources, pattern, principals) -> None:
    filters = [AclBindingFilter(kind, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
               for kind, name in resources] or [
        AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)]
    found = []
    for acl_filter in filters:
        found += result("cannot list ACLs", admin.describe_acls(acl_filter))
    if principals:
        found = [b for b in found if b.principal in principals]
    rows = sorted({(b.restype.name.replace("BROKER", "CLUSTER"), b.name, b.resource_pattern_type.name, b.principal,
                    b.host, b.operation.name, b.permission_type.name) for b in found})
    print_table(["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"], [list(r) for r in rows])


def _describe(binding) -> str:
    return (f"{binding.permission_type.name} {binding.principal or 'any principal'} {binding.operation.name} on "
            f"{binding.restype.name.replace('BROKER', 'CLUSTER')} {binding.name or '*'}")
