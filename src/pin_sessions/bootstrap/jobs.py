"""The jobs, each built from its settings group: ``pin-sessions job NAME`` and ``up``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from pin_sessions.bootstrap.keys import build_key_cipher
from pin_sessions.identity.jobs import expire_sessions, session_retention, signing_keys
from pin_sessions.platform.database import Database
from pin_sessions.platform.jobs import Job, PollingWorker
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.tokens import ACCESS_TOKEN_TTL
from pin_sessions.settings import PollingSettings, Settings
from pin_sessions.user_activity.jobs import activity_closer, activity_retention

OptionsT = TypeVar("OptionsT", bound=PollingSettings)


def _job_worker(
    build: Callable[[Database, OptionsT], Job],
    group: Callable[[Settings], OptionsT],
) -> Callable[[Runtime], PollingWorker]:
    """A job built from its settings group, polled at that group's interval."""

    def worker(runtime: Runtime) -> PollingWorker:
        options = group(runtime.settings)
        return PollingWorker(
            build(runtime.database, options),
            clock=runtime.clock,
            interval=options.polling_interval,
            registry=runtime.registry,
        )

    return worker


def _signing_keys_worker(runtime: Runtime) -> PollingWorker:
    """The rotation job: it seals new keys, and drops old ones after the longest token life."""
    settings = runtime.settings
    lifetime = max(ACCESS_TOKEN_TTL, settings.m2m_token_ttl)
    build = functools.partial(
        signing_keys.build_signing_keys_job,
        cipher=build_key_cipher(runtime),
        token_lifetime=lifetime,
    )
    return _job_worker(build, lambda settings: settings.signing_keys)(runtime)


# `pin-sessions job NAME` builds one of these; `up` runs them all as roles.
JOB_WORKERS: dict[str, Callable[[Runtime], PollingWorker]] = {
    "expire-sessions": _job_worker(
        expire_sessions.build_expire_sessions_job, lambda settings: settings.expire_sessions
    ),
    "session-retention": _job_worker(
        session_retention.build_session_retention_job, lambda settings: settings.session_retention
    ),
    "activity-closer": _job_worker(
        activity_closer.build_activity_closer_job, lambda settings: settings.activity_closer
    ),
    "activity-retention": _job_worker(
        activity_retention.build_activity_retention_job,
        lambda settings: settings.activity_retention,
    ),
    "signing-keys": _signing_keys_worker,
}
