"""Moving ``champion`` safely when several re-clusterings may finish at once.

MLflow has no compare-and-set on aliases, so the check ("is the champion still the version I
compared against?") and the move are serialised by a lease held in the registry itself: a
registered model named ``NAME.promotion-lease``. Creating a registered model whose name exists
fails in every MLflow store (a unique key), which makes creation an atomic test-and-set that
works across processes and machines with nothing but the tracking server. The lease records its
holder and an expiry that a heartbeat thread pushes forward while the holder lives (every third of
``ttl_s``, 90 s by default), so a holder that died (a killed pod) blocks others for at most
``ttl_s``, while one that is slow keeps its lease; waiters wait ``wait_s`` (the config's
``recluster.lease_wait_s``, 300 s by default), longer than a dead holder's lease lives.
"""
from __future__ import annotations

import os
import random
import socket
import threading
import time
import uuid

from ..names import utc
from ..errors import ConfigError, LeaseTimeout
from contextlib import contextmanager

LEASE_SUFFIX = ".promotion-lease"
LEASE_TTL_S = 90.0
# The lineage of cluster ids, kept where deleting a version cannot take it: tags of the registered
# model (the last champion and the smallest id never used) and of each version that was champion.
LINEAGE_NEXT = "neurcam.next_cluster_id"
LAST_CHAMPION = "neurcam.champion_version"
WAS_CHAMPION = "neurcam.was_champion"


def champion_version(name: str, alias: str = "champion") -> str | None:
    """The version ``NAME@alias`` points at, or None (no such alias, or no such model yet)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    try:
        return str(MlflowClient().get_model_version_by_alias(name, alias).version)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise


def _is_exists(exc) -> bool:
    return getattr(exc, "error_code", "") == "RESOURCE_ALREADY_EXISTS" or "already exists" in str(exc).lower()


@contextmanager
def lease(name: str, *, ttl_s: float = LEASE_TTL_S, wait_s: float = 300.0, log=print):
    """Hold ``NAME.promotion-lease`` for the duration of the block (see the module docstring)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    client = MlflowClient()
    lease_name = name + LEASE_SUFFIX
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            client.create_registered_model(
                lease_name, tags={"holder": holder, "expires": f"{time.time() + ttl_s:.3f}"},
                description=f"neurcam-dist: held while a re-clustering checks and moves {name}@champion; "
                            f"removed when it is done (safe to delete if 'expires' has passed)")
            break
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                # the SQL store found the name taken, then found it gone when it read the holder
                # back: the holder released it between the two; try again at once
                continue
            if not _is_exists(exc):
                raise
        try:
            tags = client.get_registered_model(lease_name).tags
        except MlflowException:
            continue                                   # released meanwhile: try again at once
        if float(tags.get("expires", 0)) < time.time():
            log(f"the promotion lease of {name} held by {tags.get('holder')} has expired: taking it over")
            _delete(client, lease_name, tags.get("holder"))
            continue
        if time.monotonic() > deadline:
            raise LeaseTimeout(f"{lease_name} is held by {tags.get('holder')} (expires "
                               f"{utc(float(tags['expires']))}); "
                               f"waited {wait_s:g} s")
        if not said:
            log(f"waiting for the promotion lease of {name} (held by {tags.get('holder')})")
            said = True
        time.sleep(0.2 + random.random() * 0.5)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(lease_name, holder, ttl_s, stop), daemon=True,
                            name="neurcam-lease-heartbeat")
    beat.start()
    try:
        yield holder
    finally:
        stop.set()
        beat.join(timeout=10)
        _delete(client, lease_name, holder)


def _heartbeat(lease_name: str, holder: str, ttl_s: float, stop: threading.Event) -> None:
    """Push the lease's expiry forward every ``ttl_s / 3`` while ``holder`` still holds it."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    client = MlflowClient()
    while not stop.wait(ttl_s / 3):
        try:
            if client.get_registered_model(lease_name).tags.get("holder") != holder:
                return
            client.set_registered_model_tag(lease_name, "expires", f"{time.time() + ttl_s:.3f}")
        except MlflowException:
            return
        except Exception:  # noqa: BLE001 - a server that blips: try again at the next beat
            continue


def _delete(client, lease_name: str, holder: str | None) -> None:
    """Delete the lease if ``holder`` still holds it (never someone else's fresh lease)."""
    from mlflow.exceptions import MlflowException
    try:
        if client.get_registered_model(lease_name).tags.get("holder") == holder:
            client.delete_registered_model(lease_name)
    except MlflowException:
        pass


# What a SQL store's unique key says when two processes create the same alias at once (SQLite,
# PostgreSQL, MySQL): MLflow reads the alias, finds none, and both insert it.
_ALIAS_RACE = ("UNIQUE constraint failed", "duplicate key value", "Duplicate entry")


def set_alias(client, name: str, alias: str, version: str, tries: int = 5) -> None:
    """``client.set_registered_model_alias``, tried again when another process created the same
    alias in the same instant (two re-clusterings registering at once): the store's unique key
    refuses the second insert, and the next try finds the alias and moves it. Any other error is
    raised at once."""
    from mlflow.exceptions import MlflowException
    for attempt in range(tries):
        try:
            client.set_registered_model_alias(name, alias, str(version))
            return
        except MlflowException as exc:
            if attempt == tries - 1 or not any(s in str(exc) for s in _ALIAS_RACE):
                raise
            time.sleep(0.1 * (attempt + 1))


def promote_if_unchanged(name: str, version: str, expected: str | None, alias: str = "champion",
                         **lease_kwargs) -> tuple[bool, str | None]:
    """Compare-and-set: move ``alias`` to ``version`` only if it still points at ``expected``
    (None: no champion yet). Returns ``(moved, the champion found under the lease)``."""
    from mlflow import MlflowClient
    with lease(name, **lease_kwargs):
        current = champion_version(name, alias)
        if current != (None if expected is None else str(expected)):
            return False, current
        set_alias(MlflowClient(), name, alias, str(version))
        if alias == "champion":
            record_champion(name, str(version))
        return True, current


def record_champion(name: str, version: str) -> None:
    """Note ``version`` as champion in the lineage: the version's ``neurcam.was_champion`` tag,
    and the registered model's last champion and smallest never-used cluster id."""
    from mlflow import MlflowClient
    client = MlflowClient()
    mv = client.get_model_version(name, version)
    client.set_model_version_tag(name, version, WAS_CHAMPION, "true")
    known = _int(client.get_registered_model(name).tags.get(LINEAGE_NEXT))
    client.set_registered_model_tag(name, LINEAGE_NEXT, str(max(known, _int(mv.tags.get("next_cluster_id")))))
    client.set_registered_model_tag(name, LAST_CHAMPION, version)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def former_champion(name: str) -> tuple[str | None, str | None]:
    """What to compare a challenger with when ``NAME@champion`` is missing: ``(version, note)``.

    ``(None, None)`` when the model never had a champion (the challenger becomes the first). When
    it had one whose version was deleted (the alias goes with it), the newest remaining version
    that was champion, and a note saying so; ``ConfigError`` when none remains, since new ids
    would break every downstream join on the old ones."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    client = MlflowClient()
    try:
        last = client.get_registered_model(name).tags.get(LAST_CHAMPION)
    except MlflowException:
        return None, None
    if last is None:
        return None, None
    former = [mv for mv in client.search_model_versions(f"name = '{name}'") if mv.tags.get(WAS_CHAMPION) == "true"]
    if not former:
        raise ConfigError(f"{name}@champion (version {last}) is gone from the registry and no version that was "
                          f"champion remains, so there are no cluster ids to carry over: choose the version to "
                          f"continue from with 'neurcam promote {name} VERSION' (its ids are kept), then run again")
    best = max(former, key=lambda mv: int(mv.version))
    return str(best.version), (f"{name}@champion (version {last}) is gone from the registry: compared with version "
                               f"{best.version}, the newest remaining version that was champion")


def lineage_next_id(name: str) -> int:
    """The smallest cluster id no version of ``name`` ever used (each version's ``next_cluster_id``
    tag, and the registered model's record of the champions' even when their versions were
    deleted), so a retired id is never handed to a new segment."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    client = MlflowClient()
    try:   # the registered model's record survives deleted versions
        best = _int(client.get_registered_model(name).tags.get(LINEAGE_NEXT))
    except MlflowException:
        return 0
    for mv in client.search_model_versions(f"name = '{name}'"):
        best = max(best, _int(mv.tags.get("next_cluster_id")))
    return best
