"""The pure decisions of the UNICORE and firecREST executors (``launchers.remote.decide``) and
their typed settings (``launchers.remote.settings``), as tables: what each answer of a site
means, without a site (docs/remote-sites.md, "Running")."""

from __future__ import annotations

from typing import Any

import pytest

from launchers.config.model import (
    FirecrestGroup,
    FirecrestSite,
    Position,
    UnicoreGroup,
    UnicoreSite,
)
from launchers.jobs.record import RcRecord, epoch_iso
from launchers.jobs.state import JobState
from launchers.jobs.update import update_for_rc
from launchers.remote import decide as D
from launchers.remote import settings as S
from launchers.remote.firecrest import FirecrestLauncher
from launchers.remote.unicore import UnicoreLauncher


def rc(code: int, signal: int | None = None) -> RcRecord:
    return RcRecord(rc=code, signal=signal)


# -- UNICORE ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("READY", JobState.PENDING),
        ("STAGINGIN", JobState.PENDING),
        ("QUEUED", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("STAGINGOUT", JobState.RUNNING),
        ("SUCCESSFUL", None),  # final: decided with job.rc
        ("FAILED", None),
        ("UNDEFINED", None),  # unknown: the job keeps its state
    ],
)
def test_unicore_progress(status: str, state: JobState | None) -> None:
    update = D.unicore_progress(status)
    assert (update.state if update else None) is state
    if update is not None:
        assert update.slurm_state == status


ABORTED = {"status": "FAILED", "statusMessage": "Job aborted."}
NONZERO = {"status": "FAILED", "statusMessage": "User application exited with non-zero exit code: 3.", "exitCode": "3"}  # fmt: skip


@pytest.mark.parametrize(
    ("props", "rc_", "cancel", "state", "code", "reason"),
    [
        ({"status": "SUCCESSFUL"}, None, False, JobState.COMPLETED, 0, ""),
        ({"status": "SUCCESSFUL"}, rc(0), False, JobState.COMPLETED, 0, ""),
        ({"status": "SUCCESSFUL"}, rc(2), False, JobState.FAILED, 2,
         "UNICORE reported SUCCESSFUL but job.rc says exit code 2"),
        (NONZERO, None, False, JobState.FAILED, 3, NONZERO["statusMessage"]),
        (NONZERO, rc(5), False, JobState.FAILED, 3, NONZERO["statusMessage"]),  # the site's code
        ({"status": "FAILED"}, rc(5), False, JobState.FAILED, 5, "exit code 5"),
        ({"status": "FAILED"}, None, False, JobState.FAILED, None, "failed"),
        (ABORTED, rc(0), False, JobState.COMPLETED, 0, ""),  # completed just before the abort
        (ABORTED, rc(143, 15), True, JobState.CANCELLED, 143, "cancelled on request"),
        (ABORTED, None, True, JobState.CANCELLED, None, "cancelled on request"),
        (ABORTED, rc(1), True, JobState.FAILED, 1, "Job aborted."),  # failed, not signalled
        (ABORTED, None, False, JobState.FAILED, None, "Job aborted."),
    ],
)  # fmt: skip
def test_unicore_final(
    props: dict[str, Any],
    rc_: RcRecord | None,
    cancel: bool,
    state: JobState,
    code: int | None,
    reason: str,
) -> None:
    update = D.unicore_final(props, rc_, cancel_requested=cancel)
    assert (update.state, update.exit_code, update.reason) == (state, code, reason)


def test_unicore_abort_waits_for_job_rc() -> None:
    """After "Job aborted.", job.rc is awaited 40 s for a job seen running, 5 s otherwise, and
    not at all for a job that never reached the batch system."""
    assert D.unicore_aborted(ABORTED) and not D.unicore_aborted(NONZERO)
    assert not D.reached_batch_system({"batchSystemID": "N/A"})
    assert not D.reached_batch_system({}) and D.reached_batch_system({"batchSystemID": "42"})
    assert D.abort_grace(True) == 40.0 and D.abort_grace(False) == 5.0
    assert D.waits_for_rc((100.0, True), 139.0) and not D.waits_for_rc((100.0, True), 140.0)
    assert D.waits_for_rc((100.0, False), 104.0) and not D.waits_for_rc((100.0, False), 105.0)


@pytest.mark.parametrize(
    ("text", "code"),
    [("3", 3), (3, 3), ("-1", -1), (" 0", 0), ("", None), (None, None), ("x", None)],
)
def test_unicore_exit_code(text: Any, code: int | None) -> None:
    assert D.unicore_exit_code({"exitCode": text}) == code


def test_unicore_gone() -> None:
    """A job URL answering 404: FAILED with the reason, CANCELLED after a cancel request."""
    failed, cancelled = (
        D.unicore_gone(cancel_requested=False),
        D.unicore_gone(cancel_requested=True),
    )
    assert failed.state is JobState.FAILED and failed.slurm_state == "GONE"
    assert cancelled.state is JobState.CANCELLED
    assert failed.reason == cancelled.reason and "(404)" in str(failed.reason)


def test_attempt_tags_name_one_attempt() -> None:
    assert D.attempt_tag("t-d-0123abcd", 2) == "t-d-0123abcd-a2"


# -- firecREST --------------------------------------------------------------------------------


def row(state: str, **status: Any) -> dict[str, Any]:
    times = status.pop("time", {})
    return {"status": {"state": state, **status}, "time": times}


@pytest.mark.parametrize(
    ("the_row", "rc_", "cancel", "state", "code", "reason"),
    [
        (row("PENDING", stateReason="Priority"), None, False, JobState.PENDING, None, "Priority"),
        (row("PENDING", stateReason="None"), None, False, JobState.PENDING, None, None),
        (row("RUNNING"), None, False, JobState.RUNNING, None, None),
        (row("COMPLETED", exitCode=0), None, False, JobState.COMPLETED, 0, ""),
        (row("COMPLETED", exitCode=0), rc(4), False, JobState.FAILED, 4, "exit code 4"),
        (row("FAILED", exitCode=1), None, False, JobState.FAILED, 1, "exit code 1"),
        (row("FAILED", exitCode=1), rc(7), False, JobState.FAILED, 7, "exit code 7"),
        (row("FAILED"), None, False, JobState.FAILED, None, "FAILED"),
        (row("CANCELLED by 0"), None, True, JobState.CANCELLED, None, "cancelled on request"),
        (row("TIMEOUT"), rc(143, 15), False, JobState.TIMEOUT, 143, "exit code 143"),
        # a signalled job.rc after a cancel request is CANCELLED (update_for_rc); it was FAILED
        (row("COMPLETED"), rc(143, 15), True, JobState.CANCELLED, 143, "cancelled on request"),
        (row("COMPLETED"), rc(143, 15), False, JobState.FAILED, 143, "exit code 143"),
    ],
)  # fmt: skip
def test_firecrest_update(
    the_row: dict[str, Any],
    rc_: RcRecord | None,
    cancel: bool,
    state: JobState,
    code: int | None,
    reason: str | None,
) -> None:
    update = D.firecrest_update(the_row, rc_, cancel_requested=cancel)
    assert update is not None
    assert (update.state, update.exit_code, update.reason) == (state, code, reason)
    assert update.slurm_state == the_row["status"]["state"]
    assert D.firecrest_state(the_row)[1] == the_row["status"]["state"]


def test_firecrest_update_of_an_unknown_state_changes_nothing() -> None:
    assert D.firecrest_update(row("WEIRD"), None, cancel_requested=False) is None
    assert D.firecrest_state(row("WEIRD")) == (None, "WEIRD")


def test_firecrest_times_are_the_sites() -> None:
    """``time.start`` of a job no longer pending and ``time.end`` of a final job are recorded."""
    pending = D.firecrest_update(row("PENDING", time={"start": 5}), None, cancel_requested=False)
    done = D.firecrest_update(
        row("COMPLETED", time={"start": 100, "end": 160}), None, cancel_requested=False
    )
    assert pending is not None and pending.started_at is None
    assert done is not None and (done.started_at, done.ended_at) == (epoch_iso(100), epoch_iso(160))


RCS = [rc(0), rc(1), rc(143, 15), rc(0, 9), RcRecord(rc=None, signal=15)]


@pytest.mark.parametrize("rc_", RCS, ids=lambda r: f"rc={r.rc},signal={r.signal}")
def test_a_site_success_is_judged_by_job_rc_as_update_for_rc_judges_it(rc_: RcRecord) -> None:
    """Where the site says the job succeeded (UNICORE SUCCESSFUL, Slurm's COMPLETED through
    firecREST), ``job.rc`` decides its state, exit code, signal and times as ``update_for_rc``
    does for every kind (the reasons of a failure stay each site's): a signalled job.rc after a
    cancel request is CANCELLED on both sites (firecREST said FAILED before the rule was one),
    and COMPLETED clears the reason."""
    for cancel in (False, True):
        want = update_for_rc(rc_, attempt=1, cancelled=cancel)
        assert want is not None
        unicore = D.unicore_final({"status": "SUCCESSFUL"}, rc_, cancel_requested=cancel)
        firecrest = D.firecrest_update(row("COMPLETED"), rc_, cancel_requested=cancel)
        assert firecrest is not None
        for site in (unicore, firecrest):
            assert (site.state, site.exit_code, site.signal) == (
                want.state,
                want.exit_code,
                want.signal,
            )
            assert (site.started_at, site.ended_at) == (want.started_at, want.ended_at)
            if want.state is not JobState.FAILED:
                assert site.reason == want.reason


def test_update_for_rc_is_the_one_rule() -> None:
    """COMPLETED clears the reason; a signal after a cancel is CANCELLED, without a cancel
    FAILED; an rc of another attempt is ignored unless the caller knows it is this run's."""
    done = RcRecord(rc=0, signal=None, start="s", end="e", attempt=2)
    update = update_for_rc(done, attempt=2)
    assert update is not None
    assert (update.state, update.reason, update.started_at, update.ended_at) == (
        JobState.COMPLETED,
        "",
        "s",
        "e",
    )
    assert update_for_rc(done, attempt=3) is None
    assert update_for_rc(done, attempt=None) is not None
    killed = RcRecord(rc=143, signal=15)
    cancelled = update_for_rc(killed, attempt=1, cancelled=True)
    failed = update_for_rc(killed, attempt=1)
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    assert failed is not None and (failed.state, failed.reason) == (
        JobState.FAILED,
        "killed by signal 15",
    )


@pytest.mark.parametrize(
    ("record", "want"),
    [
        (None, (None, None)),
        ({"rc": 0}, (None, None)),
        ({"native_id": "12"}, ("12", None)),  # no job_name: the site is asked about 12
        ({"native_id": "12", "job_name": "n-a1"}, ("12", False)),
        ({"native_id": "9", "job_name": "n-a0"}, (None, True)),  # an earlier attempt's
    ],
)
def test_what_job_rc_says_of_a_name(record: Any, want: tuple[Any, Any]) -> None:
    assert D.rc_names(record, "n-a1") == want


def test_a_recovery_that_cannot_tell_fails_and_never_submits_again() -> None:
    """After a crash, a job whose name the site could not be asked about, or that ran at the
    site without being listed, is FAILED with what happened: submitting it again could run it
    twice."""
    failed = D.lookup_failed("n-a1", "firecREST jobs: 503")
    assert (failed.state, failed.detail) == (JobState.FAILED, "reconcile failed")
    assert failed.reason == (
        "could not tell whether job n-a1 exists on the site (firecREST jobs: 503); "
        "not submitted again"
    )
    unlisted = D.ran_unlisted("n-a1")
    assert (unlisted.state, unlisted.detail) == (JobState.FAILED, "reconcile failed")
    assert unlisted.reason == (
        "job n-a1 ran on the site (its outputs are there) but the site does not list it by "
        "name; not submitted again"
    )


def test_other_jobs_named() -> None:
    assert not D.other_jobs_named([{"name": "n"}, {"name": "allocation"}, {"name": ""}], "n")
    assert D.other_jobs_named([{"name": "n"}, {"name": "m"}], "n")


def test_ssh_unreachable() -> None:
    assert D.ssh_unreachable(424, "")
    assert D.ssh_unreachable(500, "(111, \"Connect call failed ('h', 22)\")")
    assert not D.ssh_unreachable(500, "Unexpected Slurm command response")
    assert not D.ssh_unreachable(503, "Connect call failed")


@pytest.mark.parametrize(
    ("declared", "method"),
    [
        (None, None),
        ({}, None),
        ({"service_type": "s3"}, "s3"),
        ({"serviceType": "streamer"}, "streamer"),
        ({"name": "wormhole"}, "wormhole"),
        ("s3", "s3"),
    ],
)
def test_transfer_method(declared: Any, method: str | None) -> None:
    assert D.transfer_method(declared) == method


def test_upload_plan() -> None:
    """Too big without a backend to stage it through, or empty: refused before anything is sent."""
    ok = [("a", 10), ("b", 100)]
    assert D.upload_plan(ok, machine="m", max_ops=50, method="s3", no_backend="x") == (
        None,
        frozenset({"b"}),
    )
    why, staged = D.upload_plan(ok, machine="m", max_ops=50, method=None, no_backend="ADVICE")
    assert staged == frozenset() and why is not None
    assert (
        why.startswith("b (100 B) is larger than the direct upload limit of m") and "ADVICE" in why
    )
    why, _ = D.upload_plan(ok, machine="m", max_ops=50, method="wormhole", no_backend="x")
    assert (
        why is not None and "'wormhole' is not one launchers stages through (s3, streamer)" in why
    )
    why, _ = D.upload_plan([("e", 0)], machine="m", max_ops=50, method=None, no_backend="x")
    assert why is not None and why.startswith("e is empty: firecREST cannot upload an empty file")


def test_outputs_are_given_up_after_three_failures() -> None:
    assert [D.gives_up_outputs(n) for n in (1, 2, 3, 4)] == [False, False, True, True]


# -- settings ---------------------------------------------------------------------------------


def test_credential_variables_and_mantik_fallbacks() -> None:
    u = UnicoreSite(url="https://u/rest/core")
    names = [c.names for c in S.credential_names(u, mantik=True)]
    assert names == [
        ("LAUNCHERS_UNICORE_USERNAME", "MANTIK_UNICORE_USERNAME"),
        ("LAUNCHERS_UNICORE_PASSWORD", "MANTIK_UNICORE_PASSWORD"),
    ]
    assert [c.secret for c in S.credential_names(u, mantik=False)] == [False, True]
    bearer = S.credential_names(UnicoreSite(url="https://u", auth="bearer"), mantik=True)
    assert [c.names for c in bearer] == [("LAUNCHERS_UNICORE_TOKEN",)]
    f = FirecrestSite(api_url="https://f", token_url="https://t", machine="m", client_id_env="ID")
    assert [c.names for c in S.credential_names(f, mantik=False)] == [
        ("ID",),
        ("LAUNCHERS_FIRECREST_CLIENT_SECRET",),
    ]
    env = {"MANTIK_UNICORE_USERNAME": "me", "LAUNCHERS_UNICORE_PASSWORD": "pw"}
    used = S.variables_used(S.credential_names(u, mantik=True), env)
    assert used == "MANTIK_UNICORE_USERNAME and LAUNCHERS_UNICORE_PASSWORD"
    with pytest.raises(Exception, match="set the environment variable A or B") as e:
        S.require_env(["A", "B"], "site: no user name", {"C": "secret-value"})
    assert "secret-value" not in str(e.value)


def test_settings_of_a_launcher_and_the_executor_key() -> None:
    site = UnicoreSite(url="https://u/rest/core", account="acc")
    yaml_group = UnicoreGroup(id="g", site=site, position=Position("launchers.yaml", 3))
    standalone = UnicoreLauncher(group=UnicoreGroup(id="b", site=site))
    settings = S.SiteSettings.of(UnicoreLauncher(group=yaml_group), "unicore")
    assert settings.site == site and not settings.standalone and settings.label == "g"
    assert S.SiteSettings.of(standalone, "unicore").standalone
    key = S.executor_key(standalone, "unicore")
    assert key[0] == "unicore" and key[1] == site.url and key[-1] is True
    fsite = FirecrestSite(api_url="https://f", token_url="https://t", machine="m", api_version=1)
    fkey = S.executor_key(FirecrestLauncher(group=FirecrestGroup(site=fsite)), "firecrest")
    assert fkey[:3] == ("firecrest", "https://f", "m") and 1 in fkey
    with pytest.raises(Exception, match="has no firecREST site"):
        S.executor_key(UnicoreLauncher(group=yaml_group), "firecrest")


@pytest.mark.parametrize(
    "site",
    [
        UnicoreSite(url="https://u/rest/core", auth="bearer", user_preferences="group:x"),
        FirecrestSite(api_url="https://f", token_url="https://t", machine="m", workdir="/s/{user}"),
    ],
)
def test_the_recorded_site_gives_the_site_back(site: Any) -> None:
    kind = "unicore" if isinstance(site, UnicoreSite) else "firecrest"
    record = S.site_record(site, mantik=True)
    assert record["mantik"] is True and not any("secret" in str(v) for v in record.values())
    back, mantik = S.site_from_record(kind, "t-1", {f"{kind}_site": record})
    assert mantik is True
    assert {k: getattr(back, k) for k in S.RECORD_FIELDS[kind]} == {
        k: getattr(site, k) for k in S.RECORD_FIELDS[kind]
    }
    with pytest.raises(Exception, match="its record does not name its"):
        S.site_from_record(kind, "t-1", {})
