"""Every model invariant is listed under its guarantee in the catalogue, and nothing else is."""
from __future__ import annotations

from spec.catalogue import CATALOGUE
from spec.models.group import GroupConfig, GroupModel
from spec.models.idempotence import IdempotenceConfig, IdempotenceModel
from spec.models.log import LogConfig, LogModel
from spec.models.mirror import MirrorConfig, MirrorModel
from spec.models.replication import ReplicationConfig, ReplicationModel
from spec.models.transactions import TransactionsConfig, TransactionsModel

MODELS = [LogModel(LogConfig()), ReplicationModel(ReplicationConfig()), GroupModel(GroupConfig()),
          IdempotenceModel(IdempotenceConfig()), TransactionsModel(TransactionsConfig()), MirrorModel(MirrorConfig())]


def test_catalogue_names_exactly_the_models_invariants():
    defined = {(i.guarantee_id, f"{m.name}: {i.name}") for m in MODELS for i in (*m.invariants, *m.step_invariants)}
    listed = {(g.id, ref) for g in CATALOGUE.values() for ref in g.invariants}
    assert defined == listed
