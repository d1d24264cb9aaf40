"""The mutant list: one-line breaks of Baton's promises, and the tests that must catch each.

`path` is one or more comma-separated globs (so a module that becomes a package keeps its
mutants). `before` must occur exactly once in the matching files, or the mutant is reported stale
and the run fails: the list is kept true as the code changes. `guarantee` names the row of the
guarantee table in docs/testing.md; `ci` marks the fast subset CI runs (every guarantee that has
mutants, the seven that survived before issue 12, and the issue-22 audit's, one or more per module
they cover). `equivalent` gives the reason a mutant is
not run: it changes no behaviour a user can observe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    module: str
    path: str
    before: str
    after: str
    tests: tuple[str, ...]
    guarantee: str | None = None
    equivalent: str | None = None
    ci: bool = False  # in the fast subset CI runs: each guarantee, the issue-12 and -22 ones
    timeout: float = 300.0


# A module that becomes a package keeps its mutants: a matching directory means its .py files.
ENGINE_FILES = "orchestrator/engine*"
LIFECYCLE = "tests/orchestrator/test_lifecycle.py"
ORACLE_TESTS = (
    f"{LIFECYCLE}::test_the_transition_tables_have_exactly_the_documented_edges",
    f"{LIFECYCLE}::test_the_state_sets_are_the_documented_ones",
)
ENGINE_RULES = "tests/orchestrator/test_engine_rules.py"
JOBS_API = "tests/orchestrator/api/routes/test_jobs.py"
RUNTIME = "tests/worker/test_runtime.py"
LOCAL_SESSIONS = "tests/orchestrator/backends/local/test_sessions.py"
LOCAL_BACKEND = "tests/orchestrator/backends/local/test_backend.py"

MUTANTS: tuple[Mutant, ...] = (
    # --- orchestrator/lifecycle.py: the transition tables and the pure rules ------------------
    Mutant(
        "lifecycle-succeeded-to-queued",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    JobState.SUCCEEDED: frozenset(),",
        "    JobState.SUCCEEDED: frozenset({JobState.QUEUED}),",
        (*ORACLE_TESTS, f"{LIFECYCLE}::test_job_transition_pairs"),
        guarantee="lifecycle",
        ci=True,
    ),
    Mutant(
        "lifecycle-paused-to-running",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    JobState.PAUSED: frozenset({JobState.QUEUED, JobState.CANCELLED}),",
        "    JobState.PAUSED: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.RUNNING}),",
        ORACLE_TESTS,
        guarantee="lifecycle",
    ),
    Mutant(
        "lifecycle-failed-cannot-resume",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    JobState.FAILED: frozenset({JobState.QUEUED}),",
        "    JobState.FAILED: frozenset(),",
        ORACLE_TESTS,
        guarantee="lifecycle",
    ),
    Mutant(
        "lifecycle-segment-succeeded-to-failed",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    SegmentState.SUCCEEDED: frozenset(),",
        "    SegmentState.SUCCEEDED: frozenset({SegmentState.FAILED}),",
        (*ORACLE_TESTS, f"{LIFECYCLE}::test_segment_transition_pairs"),
        guarantee="lifecycle",
    ),
    Mutant(
        "lifecycle-cancelling-frees-its-slot",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    {SegmentState.LAUNCHING, SegmentState.RUNNING, SegmentState.CANCELLING}",
        "    {SegmentState.LAUNCHING, SegmentState.RUNNING}",
        ORACLE_TESTS,
        guarantee="Kaggle session cap",
    ),
    Mutant(
        "lifecycle-no-progress-is-progress",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "        if not end.progressed and not job.pause_requested:",
        "        if False:",
        (f"{LIFECYCLE}::test_a_segment_that_commits_no_new_step_counts_as_a_failure",),
        guarantee="no infinite chaining",
        ci=True,
    ),
    Mutant(
        "lifecycle-one-failure-too-many",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    if failures > job.max_failures:",
        "    if failures > job.max_failures + 1:",
        (f"{LIFECYCLE}::test_failures_retry_until_max_failures_then_fail_with_the_reason",),
        guarantee="retries",
        ci=True,
    ),
    Mutant(
        "lifecycle-commit-keeps-failures",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "        changes = JobChanges(steps_done=end.end_step, failures=0)",
        "        changes = JobChanges(steps_done=end.end_step)",
        (f"{LIFECYCLE}::test_committed_segment_chains_the_next_or_finishes",),
        guarantee="retries",
    ),
    Mutant(
        "lifecycle-done-one-step-late",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "        done = end.end_step >= job.total_steps",
        "        done = end.end_step > job.total_steps",
        (f"{LIFECYCLE}::test_committed_segment_chains_the_next_or_finishes",),
        guarantee="lifecycle",
    ),
    Mutant(
        "lifecycle-quota-never-parks",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    if job.state is JobState.QUEUED and refresh_at is not None and refresh_at > now:",
        "    if job.state is JobState.QUEUED and refresh_at is not None and refresh_at < now:",
        (f"{LIFECYCLE}::test_quota_parks_and_wakes_jobs",),
        guarantee="quota waiting",
        ci=True,
    ),
    Mutant(
        "lifecycle-quota-never-wakes",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    if job.state is JobState.WAITING and (refresh_at is None or refresh_at <= now):",
        "    if job.state is JobState.WAITING and refresh_at is None:",
        (f"{LIFECYCLE}::test_quota_parks_and_wakes_jobs",),
        guarantee="quota waiting",
    ),
    Mutant(
        "lifecycle-cancel-a-finished-job",
        "lifecycle",
        "orchestrator/lifecycle.py",
        "    if job.state in FINISHED_JOB_STATES:",
        "    if job.state is JobState.CANCELLED:",
        (f"{LIFECYCLE}::test_user_actions",),
        guarantee="lifecycle",
    ),
    # --- orchestrator/transitions.py: the compare-and-set writer --------------------------------
    Mutant(
        "transitions-job-cas-dropped",
        "transitions",
        "orchestrator/transitions.py",
        "        .where(Job.id == job_id, Job.state == expected.value)",
        "        .where(Job.id == job_id)",
        (f"{LIFECYCLE}::test_compare_and_set_refuses_a_stale_expected_state",),
        guarantee="compare-and-set",
        ci=True,
    ),
    Mutant(
        "transitions-segment-cas-dropped",
        "transitions",
        "orchestrator/transitions.py",
        "        .where(Segment.id == segment.id, Segment.state == expected.value)",
        "        .where(Segment.id == segment.id)",
        (f"{LIFECYCLE}::test_segment_compare_and_set_refuses_a_stale_expected_state",),
        guarantee="compare-and-set",
        ci=True,
    ),
    Mutant(
        "transitions-job-table-unchecked",
        "transitions",
        "orchestrator/transitions.py",
        "    if target is not None and not job_transition_allowed(expected, target):",
        "    if False:",
        (f"{LIFECYCLE}::test_job_transition_pairs",),
        guarantee="lifecycle",
    ),
    Mutant(
        "transitions-segment-table-unchecked",
        "transitions",
        "orchestrator/transitions.py",
        "    if not segment_transition_allowed(expected, target):",
        "    if False:",
        (f"{LIFECYCLE}::test_segment_transition_pairs",),
        guarantee="lifecycle",
    ),
    Mutant(
        "transitions-no-finished-at",
        "transitions",
        "orchestrator/transitions.py",
        '            values["finished_at"] = now',
        "            pass",
        (f"{JOBS_API}::test_actions_follow_the_lifecycle_and_conflicts_get_409",),
    ),
    Mutant(
        # A reason or a segment's error holding NUL or a lone surrogate written as it is: the
        # database refuses the write of the very failure it reports (sweep round 2026-11-28).
        "transitions-unstorable-text-written-raw",
        "transitions",
        "orchestrator/transitions.py",
        "    return {key: storable(v) if isinstance(v, str) else v for key, v in fields.items()}",
        "    return dict(fields)",
        (
            "tests/orchestrator/test_transitions.py::"
            "test_text_the_databases_refuse_is_written_with_a_replacement_character",
        ),
        guarantee="error contract",
        ci=True,
    ),
    # --- orchestrator/planner.py ---------------------------------------------------------------
    Mutant(
        "planner-forgets-measured-save",
        "planner",
        "worker/boundary/planning.py",
        "        save_seconds=save * ESTIMATE_PADDING,",
        "        save_seconds=None,",
        (
            "tests/orchestrator/test_planner.py",
            f"{ENGINE_RULES}::test_the_next_segment_keeps_the_save_and_upload_time_earlier_"
            "segments_measured",
        ),
        guarantee="learned estimates",
    ),
    Mutant(
        "planner-forgets-measured-upload",
        "planner",
        "worker/boundary/planning.py",
        "            max(past.upload_seconds for past in recent) * ESTIMATE_PADDING, upload_floor",
        "            0.0, upload_floor",
        ("tests/orchestrator/test_planner.py",),
        guarantee="learned estimates",
    ),
    Mutant(
        "planner-publish-ignores-growth",
        "planner",
        "worker/boundary/planning.py",
        "    return math.ceil(size + growth * max(0.0, steps_ahead))",
        "    return size",
        ("tests/orchestrator/test_planner_handoff.py",),
        guarantee="learned estimates",
    ),
    Mutant(
        "planner-save-ignores-growth",
        "planner",
        "worker/boundary/planning.py",
        "        save = max(save, checkpoint_bytes / min(rates))",
        "        save = save",
        ("tests/orchestrator/test_planner.py",),
        guarantee="learned estimates",
    ),
    Mutant(
        "planner-quota-ignored",
        "planner",
        "orchestrator/planner.py",
        "        limit = min(limit, quota_seconds)",
        "        limit = limit",
        ("tests/orchestrator/test_planner.py",),
        guarantee="quota waiting",
        ci=True,
    ),
    Mutant(
        "planner-restarts-from-zero",
        "planner",
        "orchestrator/planner.py",
        "        start_step=latest.step if latest else 0,",
        "        start_step=0,",
        ("tests/orchestrator/test_planner.py",),
        guarantee="exact resume",
    ),
    Mutant(
        "planner-resume-without-expect",
        "planner",
        "orchestrator/planner.py",
        "        expect=plan.resume,",
        "        expect=None,",
        ("tests/orchestrator/test_planner.py",),
        guarantee="verified handoff",
    ),
    Mutant(
        "planner-no-minimum-session",
        "planner",
        "worker/boundary/planning.py",
        "    return max(floor, USEFUL_FACTOR * fixed)",
        "    return floor",
        ("tests/orchestrator/test_planner.py",),
        guarantee="quota waiting",
    ),
    # --- the engine (orchestrator/engine.py, or the orchestrator/engine/ package) -------------
    Mutant(
        "engine-every-segment-progresses",
        "engine",
        ENGINE_FILES,
        "progressed=bool(committed and result and result.end_step > segment.start_step),",
        "progressed=True,",
        (
            f"{ENGINE_RULES}::test_a_session_too_short_for_one_step_fails_the_job_instead_of_"
            "chaining",
        ),
        guarantee="no infinite chaining",
        ci=True,
    ),
    Mutant(
        "engine-forgets-measured-save",
        "engine",
        ENGINE_FILES,
        "save_seconds=timings.save or 0.0,",
        "save_seconds=0.0,",
        (
            f"{ENGINE_RULES}::test_the_next_segment_keeps_the_save_and_upload_time_earlier_"
            "segments_measured",
        ),
        guarantee="learned estimates",
        ci=True,
    ),
    Mutant(
        "engine-wakes-before-the-refresh",
        "engine",
        ENGINE_FILES,
        "        decision = decide_quota(job_view(job), refresh_at, now)",
        "        decision = decide_quota(job_view(job), None, now)",
        (
            "tests/orchestrator/backends/test_kaggle.py::test_spent_quota_parks_the_job_until_"
            "the_refresh",
        ),
        guarantee="quota waiting",
    ),
    Mutant(
        "engine-forgets-history",
        "engine",
        ENGINE_FILES,
        " for segment in done if segment.timings]",
        " for segment in done if False]",
        (
            f"{ENGINE_RULES}::test_the_next_segment_keeps_the_save_and_upload_time_earlier_"
            "segments_measured",
        ),
        guarantee="learned estimates",
    ),
    Mutant(
        "engine-launch-skips-find",
        "engine",
        "orchestrator/engine.py, orchestrator/engine/launch.py",
        "handle = backend.find(segment.launch_id)",
        "handle = None",
        ("tests/orchestrator/test_recovery.py::test_death_around_launch_never_launches_twice",),
        guarantee="no duplicate launch",
        ci=True,
    ),
    Mutant(
        "engine-act-ignores-owner",
        "engine",
        ENGINE_FILES,
        "if job is None or job.user_id != user_id:",
        "if job is None:",
        (f"{ENGINE_RULES}::test_a_user_cannot_act_on_another_users_job",),
        guarantee="isolation",
    ),
    Mutant(
        # The job's count of consecutive errors is not stored: every wait is the first one's.
        "engine-backoff-never-grows",
        "engine",
        ENGINE_FILES,
        "        self._schedule(job.id, delay, transient_errors=errors)",
        "        self._schedule(job.id, delay)",
        (
            "tests/orchestrator/engine/test_errors.py::test_the_wait_grows_with_each_"
            "consecutive_error_then_the_job_goes_on",
        ),
        guarantee="error contract",
        ci=True,
    ),
    Mutant(
        # A cancel of a launching segment with no handle (the push's answer was lost) takes it
        # for never started: the session runs on and its slot is freed.
        "engine-cancel-skips-find",
        "engine",
        ENGINE_FILES,
        "        handle = backend.find(segment.launch_id)\n        if handle is None:\n"
        "            _end(",
        "        handle = None\n        if handle is None:\n            _end(",
        (
            "tests/orchestrator/engine/test_launch.py::test_a_cancel_after_a_push_whose_"
            "response_was_lost_finds_the_session_and_keeps_its_slot",
        ),
        guarantee="Kaggle session cap",
        ci=True,
    ),
    Mutant(
        # Pruning one job keeps the newest `keep` checkpoints of all jobs together: the files of
        # another job's checkpoints, the one it resumes from included, are deleted.
        "engine-prune-every-job",
        "engine",
        ENGINE_FILES,
        "                .where(Checkpoint.job_id == job_id, Checkpoint.rejected.is_(None))",
        "                .where(Checkpoint.rejected.is_(None))",
        (
            "tests/orchestrator/engine/test_checkpoints.py::test_pruning_one_job_keeps_its_newest_"
            "and_never_touches_another_jobs_checkpoints",
        ),
        guarantee="retention",
        ci=True,
    ),
    # --- the API's authentication and ownership -------------------------------------------------
    Mutant(
        "api-segment-log-unowned",
        "api auth/ownership",
        "orchestrator/api/routes/jobs.py",
        "        job = queries.own_job(session, user_id, job_id)\n"
        "        segment = queries.find_segment(session, user_id, job_id, index)",
        "        job = session.get(queries.Job, job_id)\n"
        "        segment = queries.find_segment(session, job.user_id, job_id, index)",
        (f"{JOBS_API}::test_users_see_only_their_own_jobs",),
        guarantee="isolation",
        ci=True,
    ),
    Mutant(
        "api-own-job-ignores-owner",
        "api auth/ownership",
        "orchestrator/queries.py",
        "    if job is None or job.user_id != user_id:",
        "    if job is None:",
        (f"{JOBS_API}::test_users_see_only_their_own_jobs",),
        guarantee="isolation",
        ci=True,
    ),
    Mutant(
        "api-list-shows-everyone",
        "api auth/ownership",
        "orchestrator/queries.py",
        '    mine = [Job.user_id == bindparam("user_id")]',
        "    mine = []",
        (f"{JOBS_API}::test_users_see_only_their_own_jobs",),
        guarantee="isolation",
    ),
    Mutant(
        # The admin token `openssl rand -hex 16` makes (32 characters, the documented minimum)
        # refused: `baton serve` will not start with it (sweep round 2026-11-28).
        "auth-admin-token-of-the-minimum-length-refused",
        "api auth/ownership",
        "orchestrator/auth.py",
        "    if len(token) < MIN_ADMIN_TOKEN_CHARS:",
        "    if len(token) <= MIN_ADMIN_TOKEN_CHARS:",
        (
            "tests/orchestrator/test_auth.py::test_an_admin_token_of_32_random_characters_is_"
            "taken_and_a_weaker_one_is_told_why",
        ),
        ci=True,
    ),
    Mutant(
        "auth-any-token-matches",
        "api auth/ownership",
        "orchestrator/auth.py",
        '    .where(ApiToken.token_hash == bindparam("token_hash"))',
        "    .where(ApiToken.token_hash != '')",
        (f"{JOBS_API}::test_missing_or_wrong_token_gets_401",),
        guarantee="isolation",
        ci=True,
    ),
    Mutant(
        # A token created through the API with an expiry never expires.
        "api-token-expiry-dropped",
        "api auth/ownership",
        "orchestrator/api/routes/tokens.py",
        "secret, body.name, expires_at=body.expires_at)",
        "secret, body.name, expires_at=None)",
        ("tests/orchestrator/api/routes/test_tokens.py::test_an_expired_token_gets_401",),
        guarantee="isolation",
        ci=True,
    ),
    Mutant(
        # Failed authentications counted for every address together: one client's guesses
        # lock every user out with 429s (sweep round 2026-11-28).
        "api-deps-throttle-shared-by-all-addresses",
        "api auth/ownership",
        "orchestrator/api/deps.py",
        "    client = client_address(request)\n",
        '    client = "any"\n',
        (
            "tests/orchestrator/api/ui/test_session.py::"
            "test_one_address_s_failed_guesses_do_not_lock_out_another",
        ),
        ci=True,
    ),
    # --- orchestrator/queries.py: the read layer -------------------------------------------------
    Mutant(
        # A running job's ETA as if its session had just started: the time already spent is
        # counted again, so the ETA says the running session finishes work it cannot.
        "queries-eta-ignores-elapsed",
        "read layer",
        "orchestrator/queries.py",
        "        elapsed = (now - active.launched_at).total_seconds()",
        "        elapsed = 0.0",
        (
            "tests/orchestrator/test_queries.py::test_a_running_job_s_eta_counts_from_its_live_"
            "step_and_the_time_its_session_has_left",
        ),
        ci=True,
    ),
    # --- orchestrator/notifier.py: the webhook outbox --------------------------------------------
    Mutant(
        # The claim no longer checks that the row is still due: a second notifier that listed
        # the row before the first claimed it posts it again while the first is posting.
        "notifier-claim-ignores-the-holder",
        "notifier",
        "orchestrator/notifier.py",
        "                Notification.next_attempt_at <= now,\n",
        "",
        ("tests/orchestrator/test_notifier.py::test_a_row_listed_by_two_notifiers_is_posted_once",),
        guarantee="webhook delivery",
        ci=True,
    ),
    # --- orchestrator/backends/local/backend.py: what collect hands over ----------------------
    Mutant(
        "local-collect-trusts-stored-copy",
        "local backend",
        "orchestrator/backends/local*",
        "            manifest = verify_checkpoint(store, expect)",
        '            manifest = __import__("worker.boundary.manifest")'
        ".boundary.manifest.read_manifest(store)",
        (
            "tests/orchestrator/backends/local/test_backend.py::test_a_stored_copy_damaged_before_"
            "a_repeated_collect_is_rejected",
        ),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        "local-collect-verifies-nothing",
        "local backend",
        "orchestrator/backends/local*",
        "                verify_checkpoint(source, expect)\n",
        "                pass\n",
        ("tests/orchestrator/backends/local/test_backend.py",),
        equivalent="the stored copy is verified again right after the move, so a damaged or stale "
        "output is still rejected; only where the rejected files lie differs",
    ),
    # --- worker/: the in-session runtime --------------------------------------------------------
    Mutant(
        "worker-numpy-rng-not-restored",
        "worker",
        "worker/rng.py",
        '    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], '
        'npy["cached_gaussian"]))',
        "    pass",
        (
            "tests/worker/test_checkpoint.py::test_round_trip_restores_state_step_and_every_rng",
            "tests/worker/test_rng.py",
        ),
        guarantee="exact resume",
        ci=True,
    ),
    Mutant(
        "worker-python-rng-not-restored",
        "worker",
        "worker/rng.py",
        '    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))',
        "    pass",
        ("tests/worker/test_checkpoint.py::test_round_trip_restores_state_step_and_every_rng",),
        guarantee="exact resume",
    ),
    Mutant(
        "worker-rng-not-restored-on-resume",
        "worker",
        "worker/runtime.py",
        "            restore_rng_state(resume.rng)",
        "            pass",
        (f"{RUNTIME}::test_deadline_chain_matches_uninterrupted_run",),
        guarantee="exact resume",
    ),
    Mutant(
        "worker-sampler-set-epoch-restarts",
        "worker",
        "worker/sampler.py",
        "        if epoch != self.epoch:",
        "        if True:",
        ("tests/worker/test_sampler.py",),
        guarantee="exact resume",
    ),
    Mutant(
        "worker-sampler-same-order-every-epoch",
        "worker",
        "worker/sampler.py",
        "                self.epoch += 1",
        "                self.epoch += 0",
        ("tests/worker/test_sampler.py",),
        guarantee="exact resume",
    ),
    Mutant(
        "worker-digest-insertion-order",
        "worker",
        "worker/digest.py",
        "    for key in sorted(tensors):",
        "    for key in tensors:",
        ("tests/worker/test_digest.py",),
        guarantee="exact resume",
        ci=True,
    ),
    Mutant(
        "worker-manifest-hash-not-compared",
        "worker",
        "worker/boundary/manifest.py",
        "        if path.stat().st_size != entry.bytes or sha256_file(path) != entry.sha256:",
        "        if path.stat().st_size != entry.bytes:",
        ("tests/worker/test_checkpoint.py::test_tampered_file_is_rejected",),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        # Files on disk that the manifest does not list (an interrupted write's leftovers)
        # accepted as part of the commit (sweep round 2026-11-28).
        "worker-manifest-leftover-files-accepted",
        "worker",
        "worker/boundary/manifest.py",
        "    if on_disk != set(manifest.files):",
        "    if not set(manifest.files) <= on_disk:",
        ("tests/worker/test_checkpoint.py::test_extra_leftover_file_is_rejected",),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        "worker-manifest-identity-not-checked",
        "worker",
        "worker/boundary/manifest.py",
        "        if found != wanted:",
        "        if False:",
        ("tests/worker/test_checkpoint.py::test_stale_checkpoint_is_rejected",),
        guarantee="verified handoff",
    ),
    Mutant(
        "worker-resume-without-expect",
        "worker",
        "worker/runtime.py",
        '            raise CorruptCheckpoint("resume_path given without expect: staleness is '
        'uncheckable")',
        "            return verify_checkpoint(self.root / spec.resume_path)",
        (f"{RUNTIME}::test_bad_resume_input_is_rejected_never_trained_from_scratch",),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        "worker-uncommitted-steps-count",
        "worker",
        "worker/runtime.py",
        "        if self.result.committed:\n            self.result.end_step = self.progress.step",
        "        if True:\n            self.result.end_step = self.progress.step",
        (f"{RUNTIME}::test_exception_fails_the_segment_without_a_commit",),
        guarantee="verified handoff",
    ),
    Mutant(
        "worker-commit-not-atomic",
        "worker",
        "worker/checkpoint.py",
        "        shutil.rmtree(tmp, ignore_errors=True)\n        raise",
        "        _move_into_place(tmp, output_dir / CHECKPOINT_DIR)\n        raise",
        (
            "tests/worker/test_checkpoint.py::test_failed_write_leaves_the_previous_checkpoint_"
            "and_no_temp_dir",
        ),
        guarantee="atomic checkpoint",
        ci=True,
    ),
    Mutant(
        # Renamed into place first, manifest after (the rename line moved up two statements): a
        # failure in between leaves a checkpoint directory without a whole manifest.
        "worker-manifest-after-rename",
        "worker",
        "worker/checkpoint.py",
        "            manifest = write_manifest(\n                tmp,\n"
        "                job_id=job_id,\n                segment_index=segment_index,\n"
        "                step=step,\n                model_digest=digest,\n            )\n"
        "            _move_into_place(tmp, output_dir / CHECKPOINT_DIR)\n",
        "            _move_into_place(tmp, output_dir / CHECKPOINT_DIR)\n"
        "            manifest = write_manifest(\n                output_dir / CHECKPOINT_DIR,\n"
        "                job_id=job_id,\n                segment_index=segment_index,\n"
        "                step=step,\n                model_digest=digest,\n            )\n",
        (
            "tests/worker/test_checkpoint.py::test_a_failure_writing_the_manifest_leaves_the_"
            "previous_checkpoint",
        ),
        guarantee="commit order",
        ci=True,
    ),
    Mutant(
        "worker-deadline-ignores-save",
        "worker",
        "worker/deadline.py",
        "            self.save_seconds\n            + self.estimates.upload_seconds",
        "            0.0\n            + self.estimates.upload_seconds",
        ("tests/worker/test_deadline.py",),
        guarantee="deadline rule",
        ci=True,
    ),
    Mutant(
        "worker-deadline-ignores-step-time",
        "worker",
        "worker/deadline.py",
        "    return now + k_steps * step_seconds + reserved_seconds > deadline",
        "    return now + reserved_seconds > deadline",
        ("tests/worker/test_deadline.py",),
        guarantee="deadline rule",
    ),
    Mutant(
        "worker-no-state-size-fresh",
        "worker",
        "worker/runtime.py",
        "            self.budget.record_state_size(state_nbytes(trainer.state_dict()))",
        "            pass",
        (f"{RUNTIME}::test_the_save_estimate_follows_the_state_size",),
        guarantee="deadline rule",
        ci=True,
    ),
    Mutant(
        "worker-no-state-size-resumed",
        "worker",
        "worker/runtime.py",
        "            self.budget.record_state_size(manifest.total_bytes)",
        "            pass",
        (f"{RUNTIME}::test_the_save_estimate_follows_the_state_size",),
        guarantee="deadline rule",
    ),
    Mutant(
        "worker-proctime-wrong-field",
        "worker",
        "worker/proctime.py",
        '    return int(fields[19]) / os.sysconf("SC_CLK_TCK")',
        '    return int(fields[20]) / os.sysconf("SC_CLK_TCK")',
        ("tests/worker/test_proctime.py",),
        guarantee="deadline rule",
    ),
    Mutant(
        "worker-proctime-always-import-time",
        "worker",
        "worker/proctime.py",
        "    return started\n",
        "    return IMPORT_TIME\n",
        ("tests/worker/test_proctime.py",),
        guarantee="deadline rule",
    ),
    Mutant(
        # The origin read from the session leader's record, not this process's: under the
        # runner (pytest in its own session) the other proctime tests pass it.
        "worker-proctime-session-leaders-start",
        "worker",
        "worker/proctime.py",
        '    stat = (proc / str(pid) / "stat").read_text()',
        '    stat = (proc / str(os.getsid(0)) / "stat").read_text()',
        (
            "tests/worker/test_proctime.py::test_the_origin_is_this_process_own_start_whatever_"
            "its_session_leader",
        ),
        guarantee="deadline rule",
        ci=True,
    ),
    # --- the Kaggle backend and the job spec's Kaggle rules -------------------------------------
    Mutant(
        # Only the segment the kernel runs now is found: after a restart, an earlier
        # self-chained segment's session is not found, so it is launched (pushed) again.
        "kaggle-find-only-the-current-segment",
        "kaggle",
        "orchestrator/backends/kaggle*",
        "or pushed.segment_index < wanted.segment_index:",
        "or pushed.segment_index != wanted.segment_index:",
        (
            "tests/orchestrator/backends/kaggle/test_backend.py::test_an_earlier_segment_is_found_"
            "at_its_own_version_while_a_later_one_runs",
        ),
        guarantee="self-chaining",
        ci=True,
    ),
    Mutant(
        # The job's quota reserve is not kept back: the week's last session runs to the end.
        "kaggle-quota-reserve-ignored",
        "kaggle",
        "orchestrator/backends/kaggle*",
        "            - self.options.quota_reserve_seconds\n",
        "",
        (
            "tests/orchestrator/backends/kaggle/test_backend.py::test_the_quota_reserve_is_kept_"
            "back_from_what_segments_are_sized_to",
        ),
        guarantee="quota waiting",
        ci=True,
    ),
    Mutant(
        # A TPU session may ask for 12 h: Kaggle ends it at 9 h, before its deadline and commit.
        "spec-tpu-session-cap-raised",
        "kaggle",
        "orchestrator/spec.py",
        "KAGGLE_SESSION_SECONDS = {Accelerator.TPU: 9 * 3600.0}",
        "KAGGLE_SESSION_SECONDS = {Accelerator.TPU: 12 * 3600.0}",
        (
            "tests/orchestrator/test_spec.py::test_each_accelerator_runs_on_its_machine_for_at_"
            "most_kaggle_s_session",
            "tests/orchestrator/api/test_hostile_input.py::test_a_session_longer_than_kaggle_"
            "allows_for_the_accelerator_is_refused_at_submit",
        ),
        guarantee="Kaggle session cap",
        ci=True,
    ),
    # --- issue 22's mutmut sweep: one per module it covered, on the fast tests it added --------
    Mutant(
        # The whole webhook URL is shown: its path is the secret (a Slack or Discord token).
        "webhooks-redact-keeps-the-path",
        "notifier",
        "orchestrator/webhooks.py",
        'return f"{parts.scheme}://{parts.hostname}/…" if parts.hostname else "(webhook)"',
        'return url if parts.hostname else "(webhook)"',
        (
            "tests/orchestrator/test_webhooks.py::test_only_the_scheme_and_host_of_a_webhook_are_"
            "ever_shown",
        ),
        guarantee="no secret leaks",
        ci=True,
    ),
    Mutant(
        # A segment that took no step re-commits its input without one of its files, under a
        # manifest of what it copied: the next segment resumes from less than it was given.
        "worker-recommit-drops-a-file",
        "worker",
        "worker/checkpoint.py",
        "            for name in given.files:",
        "            for name in sorted(given.files)[1:]:",
        (
            "tests/worker/test_checkpoint.py::test_a_segment_without_a_step_commits_its_input_"
            "again_byte_for_byte_as_its_own",
        ),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        # Every sync sends a tracker the whole series again: W&B and MLflow get each step twice.
        "trackers-resend-every-step",
        "trackers",
        "orchestrator/trackers/sync.py",
        "new = [point for point in steps if point.step > last]",
        "new = list(steps)",
        (
            "tests/orchestrator/trackers/test_sync.py::test_only_committed_steps_reach_the_"
            "tracker_each_once",
        ),
        guarantee="one tracker run per job",
        ci=True,
    ),
    Mutant(
        # A segment that resumed from an older checkpoint adds its steps after the ones it repeats.
        "queries-metrics-keep-repeated-steps",
        "trackers",
        "orchestrator/queries.py",
        "points = [point for point in points if point.step <= segment.start_step]",
        "points = list(points)",
        (
            "tests/orchestrator/trackers/test_sync.py::test_only_committed_steps_reach_the_"
            "tracker_each_once",
        ),
        guarantee="one tracker run per job",
    ),
    Mutant(
        # A GPU session without its GPUs trains on the CPU against accelerator quota; only a
        # missing TPU is noticed.
        "kaggle-session-gpus-unchecked",
        "kaggle",
        "worker/kaggle_session.py",
        "    if fail_without_accelerator(segment, options, root):",
        "    if options.promised_tpu and fail_without_accelerator(segment, options, root):",
        (
            "tests/worker/test_kaggle_session.py::test_a_session_without_the_promised_accelerator_"
            "fails_with_the_reason_and_trains_nothing",
        ),
        guarantee="promised accelerator",
        ci=True,
    ),
    Mutant(
        # The worker commits into its scratch folder, not /kaggle/working: the session's output
        # holds no checkpoint, and the next segment has nothing to resume from.
        "kaggle-session-output-outside-working",
        "kaggle",
        "worker/kaggle_session.py",
        "    spec = dict(segment, output_dir=str(kaggle.working), resume_path=None)",
        "    spec = dict(segment, output_dir=str(session.working), resume_path=None)",
        (
            "tests/worker/test_kaggle_session.py::test_the_worker_reads_the_segment_with_kaggles_"
            "working_folder_as_its_output",
        ),
        guarantee="exact resume",
    ),
    Mutant(
        # Idle parking puts off a queued job too: its launch waits hours for a quota refresh
        # it never needed.
        "engine-park-a-queued-job",
        "engine",
        ENGINE_FILES,
        "            Job.state == JobState.WAITING.value,\n",
        "",
        (
            "tests/orchestrator/engine/test_idle.py::test_only_jobs_with_nothing_to_do_and_no_"
            "holder_are_parked",
        ),
        guarantee="quota waiting",
        ci=True,
    ),
    Mutant(
        # A wheel set built for another interpreter is installed from anyway: its binary wheels
        # fail at import, or pip refuses them, after Kaggle updates its image.
        "wheelhouse-ignores-the-interpreter",
        "worker",
        "worker/wheelhouse.py",
        '    if described.get("interpreter") != interpreter_tag():\n',
        "    if False:\n",
        (
            "tests/worker/test_wheelhouse.py::test_a_set_for_another_interpreter_or_other_"
            "requirements_falls_back_to_the_index",
        ),
    ),
    Mutant(
        # A job's events read without its job: every user's events show on one's own job's
        # event list (the issue-22 sweep of orchestrator/queries.py, round 2026-11-24b).
        "queries-events-of-every-job",
        "read layer",
        "orchestrator/queries.py",
        "select(Event).where(Event.job_id == job_id, Event.id > after)",
        "select(Event).where(Event.id > after)",
        (
            "tests/orchestrator/test_queries.py::test_every_read_of_a_job_answers_about_that_job_"
            "alone_and_only_to_its_owner",
        ),
        guarantee="isolation",
        ci=True,
    ),
    Mutant(
        # The notifier lists delivered rows as due again: past one batch of them, a new event's
        # row is never listed and its webhook never hears of it (the round 2026-11-24b sweep).
        "notifier-lists-delivered-rows",
        "notifier",
        "orchestrator/notifier.py",
        ".where(Notification.state == PENDING, Notification.next_attempt_at <= now)",
        ".where(Notification.next_attempt_at <= now)",
        (
            "tests/orchestrator/test_notifier.py::test_rows_already_delivered_never_crowd_a_new_"
            "event_out_of_the_batch",
        ),
        guarantee="webhook delivery",
        ci=True,
    ),
    Mutant(
        # The store hands out its newest checkpoint without verifying it: a checkpoint damaged
        # in storage is resumed from (the round 2026-11-24b sweep of engine/checkpoints.py).
        "engine-resume-point-unverified",
        "engine",
        ENGINE_FILES,
        "            problem = self.verify(job_id, segment_index, step)\n",
        "            problem = None\n",
        (
            "tests/orchestrator/engine/test_checkpoints.py::test_a_job_resumes_from_its_own_"
            "newest_checkpoint_that_verifies_never_another_jobs",
        ),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        # A Kaggle refusal during an in-kernel publish is swallowed: the session reports a bug
        # ("internal error") instead of the refusal the error contract hands on.
        "kaggle-publish-refusal-read-as-bug",
        "kaggle",
        "worker/kaggle_access/before_deadline.py",
        "            errors.append(exc)\n",
        "            pass\n",
        (
            "tests/worker/kaggle_access/test_before_deadline.py::test_a_call_that_ends_in_time_"
            "gives_its_value_or_its_exception",
        ),
        guarantee="error contract",
        ci=True,
    ),
    Mutant(
        # Every 403 read as "the dataset's first version is still processing": a key Kaggle
        # refuses is retried for ever instead of failing the job with the reason.
        "kaggle-client-every-403-waits",
        "kaggle",
        "worker/kaggle_access/client.py",
        "    if status == 403 and busy_403:\n",
        "    if status == 403:\n",
        (
            "tests/worker/kaggle_access/test_client.py::test_a_403_waits_only_where_it_means_the_"
            "first_version_is_still_processing",
        ),
        guarantee="error contract",
        ci=True,
    ),
    Mutant(
        # A command for any launch counts: a pause meant for segment 3 stops segment 4 after a
        # resume.
        "kaggle-control-any-launch-id",
        "kaggle",
        "worker/kaggle_access/control.py",
        " or parts[2] != launch_id:",
        ":",
        (
            "tests/worker/kaggle_access/test_control.py::test_only_a_command_naming_this_segment_"
            "counts",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # Only the first page of a version's files is read: a checkpoint of more than 200 files
        # never shows its manifest, so it is never used and the session's handoff is lost.
        "kaggle-checkpoint-files-first-page-only",
        "kaggle",
        "worker/kaggle_access/checkpoints.py",
        '        token = page.next_page_token or ""\n',
        '        token = ""\n',
        (
            "tests/worker/kaggle_access/test_checkpoints.py::test_a_checkpoint_whose_files_span_"
            "several_pages_is_found_and_listed_whole",
        ),
        guarantee="Kaggle first contact",
        ci=True,
    ),
    # --- Sweep round 2026-11-24c (worker and backends), docs/testing.md ----------------------
    Mutant(
        # A self-chained segment whose version Kaggle still processes reads as "not published":
        # the orchestrator gives the segment's output up instead of waiting for it.
        "kaggle-find-segment-skips-a-processing-version",
        "kaggle",
        "worker/kaggle_access/checkpoints.py",
        "            if notes.startswith(version_notes(prefix)) and status != READY:",
        "            if notes.startswith(version_notes(prefix)) and status != READY and False:",
        (
            "tests/worker/kaggle_access/test_checkpoints.py::test_a_segment_whose_version_still_"
            "processes_is_waited_for_and_a_failed_one_never_used",
        ),
        guarantee="self-chaining",
        ci=True,
    ),
    Mutant(
        # Where Kaggle keeps the archive, its listed size is not compared: a truncated copy on
        # Kaggle passes the orchestrator's check and is kept as the job's checkpoint.
        "kaggle-handoff-archive-size-unchecked",
        "kaggle",
        "orchestrator/backends/kaggle/handoff.py",
        "        if archive != published.archive or files[archive] != published.archive_bytes:",
        "        if archive != published.archive:",
        (
            "tests/orchestrator/backends/kaggle/test_published_check.py::test_where_kaggle_keeps_"
            "the_archive_its_exact_size_is_checked",
        ),
        guarantee="verified handoff",
        ci=True,
    ),
    Mutant(
        # The in-kernel publish records the clock's reading as the time publishing took: the
        # orchestrator learns it as the session's upload time and plans every later segment
        # around an upload of decades.
        "kaggle-publish-time-not-elapsed",
        "kaggle",
        "worker/kaggle_access/publish.py",
        "        seconds = time.time() - started",
        "        seconds = time.time()",
        (
            "tests/worker/test_kaggle_session.py::test_the_session_asks_again_after_a_passing_"
            "error_and_never_waits_for_processing",
        ),
        guarantee="learned estimates",
        ci=True,
    ),
    # --- sweep round 2026-11-24c: the engine's claim, admission, launch and cancel, the jobs API
    Mutant(
        # The claim's take compares the wrong way: a live lease is taken over, an expired one
        # never is (two engines drive one job; a dead engine's jobs are stuck).
        "engine-claim-takes-live-leases",
        "engine",
        "orchestrator/engine/claim.py",
        "Job.claim_expires_at < now,",
        "Job.claim_expires_at > now,",
        (
            "tests/orchestrator/engine/test_claim.py::test_one_owner_holds_a_job_until_its_lease_"
            "expires_and_a_renewal_extends_it",
        ),
        guarantee="no duplicate launch",
        ci=True,
    ),
    Mutant(
        # Admission forgets the sessions already running in the slot: a third GPU session
        # starts on a two-session Kaggle account.
        "engine-admission-ignores-running-sessions",
        "engine",
        "orchestrator/engine/admission.py",
        "    free = slot.limit - int(in_use or 0)\n",
        "    free = slot.limit\n",
        (
            "tests/orchestrator/engine/test_fair_admission.py::test_a_slot_runs_its_limit_at_once_"
            "never_more_and_the_next_place_goes_to_the_smaller_share",
        ),
        guarantee="Kaggle session cap",
        ci=True,
    ),
    Mutant(
        # An account refusal (a Kaggle 401) counts as one more failure: the job is pushed again
        # and again until max_failures, each push refused.
        "engine-launch-account-refusal-retried",
        "engine",
        "orchestrator/engine/launch.py",
        "final = isinstance(exc, AccountRefused)",
        "final = False",
        (
            "tests/orchestrator/engine/test_launch.py::test_a_launch_the_account_itself_may_not_"
            "run_fails_the_job_at_once",
        ),
        guarantee="error contract",
        ci=True,
    ),
    Mutant(
        # A cancel of a launching segment whose push never reached the backend leaves it
        # `launching`: the job never ends and the segment keeps its slot.
        "engine-cancel-never-started-left-launching",
        "engine",
        "orchestrator/engine/cancel.py",
        '            _end(ctx, segment, SegmentState.CANCELLED, "cancelled before it started")\n',
        "            pass\n",
        (
            "tests/orchestrator/engine/test_cancel.py::test_a_job_cancelled_before_its_push_"
            "reached_the_backend_ends_with_nothing_started",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # The operator's setting read the wrong way round: `kaggle.on_quota_exhausted: local`
        # is accepted where the operator does not allow it (and refused where it does).
        "api-local-fallback-not-the-operators-call",
        "api",
        "orchestrator/api/routes/jobs.py",
        " and not settings.allow_local_fallback:",
        " and settings.allow_local_fallback:",
        (f"{JOBS_API}::test_a_kaggle_job_continues_locally_only_where_the_operator_allows_it",),
        guarantee="changing backend",
        ci=True,
    ),
    # --- sweep round 2026-11-24d: the engine's watch phase, moving a job, counting rollbacks --
    Mutant(
        # A pause never reaches the running session: it trains on to its deadline instead of
        # committing early.
        "engine-watch-pause-never-asks-the-session-to-stop",
        "engine",
        "orchestrator/engine/watch.py",
        "    if job.pause_requested and not segment.stop_requested:\n",
        "    if False:\n",
        (
            "tests/orchestrator/engine/test_watch.py::test_a_pause_asks_the_running_session_to_"
            "stop_once_and_the_resume_continues_exactly",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # A job moved off Kaggle keeps its Kaggle options: the local spec is refused, and the
        # job cannot leave Kaggle.
        "engine-move-keeps-kaggle-options",
        "engine",
        "orchestrator/engine/move.py",
        'moved = {key: value for key, value in spec.items() if key != "kaggle"}',
        "moved = dict(spec)",
        (
            "tests/orchestrator/engine/test_move.py::test_a_job_moved_kaggle_local_kaggle_"
            "continues_each_time_and_ends_on_the_digest",
        ),
        guarantee="changing backend",
        ci=True,
    ),
    Mutant(
        # Rollbacks counted over every job: once any job rolled back, a diverged job fails at
        # once instead of resuming from its last good checkpoint (no row of the table: the
        # divergence watchdog).
        "engine-rollbacks-counted-over-every-job",
        "engine",
        "orchestrator/engine/rollbacks.py",
        "Event.job_id == job_id, Event.kind == ROLLED_BACK_EVENT",
        "Event.kind == ROLLED_BACK_EVENT",
        (
            "tests/orchestrator/engine/test_watch.py::test_a_diverged_job_rolls_back_once_with_"
            "another_seed_counting_only_its_own_rollbacks",
        ),
        ci=True,
    ),
    Mutant(
        # Every job's measured costs plan this job's sessions: one job that measured a start-up
        # longer than its sessions fails the next job as too short before it ever ran.
        "engine-launch-history-of-every-job",
        "engine",
        "orchestrator/engine/launch.py",
        "        .where(Segment.job_id == job_id, Segment.state == SegmentState.SUCCEEDED.value)\n",
        "        .where(Segment.state == SegmentState.SUCCEEDED.value)\n",
        (
            "tests/orchestrator/engine/test_launch.py::test_one_jobs_measured_costs_never_plan_or_"
            "fail_another_job",
        ),
        guarantee="learned estimates",
        ci=True,
    ),
    # --- Sweep round 2026-11-27 (sweeph): launch, cancel, the jobs API's helpers, admission ----
    Mutant(
        # The move to the local backend no longer checks that the job is still queued once its
        # checkpoint is fetched: a job cancelled meanwhile is moved anyway.
        "engine-move-ignores-a-cancel-during-the-fetch",
        "engine",
        "orchestrator/engine/launch.py",
        "        if fresh is None or fresh.state != JobState.QUEUED.value or fresh.backend != "
        "job.backend:\n",
        "        if fresh is None or fresh.backend != job.backend:\n",
        (
            "tests/orchestrator/engine/test_launch.py::test_a_job_cancelled_while_its_checkpoint_is_"
            "fetched_stays_cancelled_where_it_was",
        ),
        guarantee="compare-and-set",
        ci=True,
    ),
    Mutant(
        # A session that cannot be stopped is marked `cancelled` at once: it loses its slot while
        # it still runs on the account.
        "engine-cancel-unstoppable-session-frees-its-slot",
        "engine",
        "orchestrator/engine/cancel.py",
        "        SegmentState.CANCELLING,\n",
        "        SegmentState.CANCELLED,\n",
        (
            "tests/orchestrator/engine/test_cancel.py::test_a_cancelled_segment_s_events_say_how_it_"
            "ended_and_what_may_still_run",
        ),
        guarantee="Kaggle session cap",
        ci=True,
    ),
    # --- Sweep round 2026-11-27 (sweepj): engine/checkpoints.py's fetch of a checkpoint left
    # on Kaggle, and the Kaggle control channel (docs/testing.md) ----------------------------------
    Mutant(
        # A move off Kaggle whose every copy there fails verification goes on from nothing: the
        # job is restarted from step 0 on the other backend instead of being refused.
        "engine-move-restarts-when-no-copy-can-be-fetched",
        "engine",
        ENGINE_FILES,
        "            if ref is None and rejected:\n",
        "            if ref is None and False:\n",
        (
            "tests/orchestrator/engine/test_checkpoints.py::test_a_move_off_kaggle_fetches_the_"
            "newest_copy_that_verifies_or_is_refused_saying_why",
        ),
        guarantee="changing backend",
        ci=True,
    ),
    Mutant(
        # An error Kaggle answers in the body of a new control version is read as written: the
        # pending `baton pause` is dropped and the kernel never hears it.
        "kaggle-control-body-error-ignored",
        "kaggle",
        "worker/kaggle_access/control.py",
        '    error = getattr(response, "error", None)\n',
        "    error = None\n",
        (
            "tests/worker/kaggle_access/test_control.py::test_an_error_kaggle_answers_in_the_body_"
            "keeps_the_command_pending_and_says_why",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    # --- Sweep round 2026-11-27 (sweepi): the read layer's live ETA, the webhook caps ---------
    Mutant(
        # The running session's own step time dropped: a session slower (or faster) than the
        # earlier ones is planned at their pace, and the ETA a user sees is off by its drift.
        "queries-eta-ignores-the-running-session-s-pace",
        "read layer",
        "orchestrator/queries.py",
        "    live_step_seconds = progress.step_seconds if progress else None\n",
        "    live_step_seconds = None\n",
        (
            "tests/orchestrator/test_queries.py::test_a_running_session_s_own_pace_plans_its_"
            "steps_and_the_typical_pace_the_later_ones",
        ),
        guarantee="live progress and ETA",
        ci=True,
    ),
    Mutant(
        # No per-user cap: one user's webhooks take every POST slot and every other user's
        # notifications wait behind them.
        "notifier-no-per-user-cap",
        "notifier",
        "orchestrator/notifier.py",
        "            if mine >= self.per_user:\n",
        "            if False:\n",
        ("tests/orchestrator/test_notifier.py::test_at_most_16_posts_run_at_once_and_4_per_user",),
        guarantee="webhook fairness caps",
        ci=True,
    ),
    # --- sweep round 2026-11-27 (sweepf): the flat checkpoint layout, and publish's session log --
    Mutant(
        # A flat mount's files are staged without the folders above them: a checkpoint two
        # folders deep (sharded optimizer states) cannot be staged, so the next session fails
        # instead of resuming from it.
        "version-layout-mount-staged-without-its-folders",
        "kaggle",
        "worker/boundary/version_layout.py",
        "            (target / path).parent.mkdir(parents=True, exist_ok=True)\n",
        "            (target / path).parent.mkdir(exist_ok=True)\n",
        (
            "tests/worker/boundary/test_version_layout.py::test_a_mounted_version_in_any_layout_"
            "becomes_the_checkpoint_without_a_copy",
        ),
        ci=True,
    ),
    Mutant(
        # Kaggle refusing the session's upload escapes the kernel after its segment committed:
        # the session ends in a traceback instead of leaving its checkpoint for the orchestrator
        # with the reason in its log.
        "kaggle-publish-refusal-escapes-the-session",
        "kaggle",
        "worker/kaggle_access/publish.py",
        "    except (Rejected, KaggleNotFound) as exc:",
        "    except KaggleNotFound as exc:",
        (
            "tests/worker/test_kaggle_session.py::test_a_checkpoint_the_session_cannot_publish_is_"
            "left_for_the_orchestrator_and_its_log_says_why",
        ),
        ci=True,
    ),
    # --- sweep round 2026-11-27 (sweepg): the engine's facade, the embedded loop, kernels.py ----
    Mutant(
        # `reconcile_job` drives a job another orchestrator holds: two drivers launch, watch
        # and cancel the same job.
        "engine-facade-acts-without-the-claim",
        "engine",
        "orchestrator/engine/facade.py",
        "            if claim is None:\n                return  # another worker drives it now\n",
        "            if False:\n                return  # another worker drives it now\n",
        ("tests/orchestrator/engine/test_facade.py::test_only_the_claims_holder_acts_on_a_job",),
        guarantee="no duplicate launch",
        ci=True,
    ),
    Mutant(
        # A look that went through never resets the count of consecutive transient errors: the
        # next outage starts at the last one's longest wait.
        "engine-facade-outage-count-never-resets",
        "engine",
        "orchestrator/engine/facade.py",
        "        self._schedule(job.id, step.delay, transient_errors=0)\n",
        "        self._schedule(job.id, step.delay)\n",
        (
            "tests/orchestrator/engine/test_facade.py::test_an_outage_is_told_once_and_the_next_"
            "one_waits_from_the_start_again",
        ),
        guarantee="error contract",
        ci=True,
    ),
    Mutant(
        # `baton move` of a paused job whose session still runs: the job trains on two backends
        # at once (sweep round 2026-11-28).
        "engine-facade-moves-a-job-whose-session-runs",
        "engine",
        "orchestrator/engine/facade.py",
        "or active_segment(session, job_id) is not None:",
        "or active_segment(session, None) is not None:",
        (
            "tests/orchestrator/engine/test_move.py::test_only_a_paused_job_with_no_live_session_is_moved",
        ),
        guarantee="changing backend",
        ci=True,
    ),
    Mutant(
        # A user's resume (or cancel) keeps the backoff the job had: it is acted on only when
        # that backoff ends, an hour later after a run of backend errors (round 2026-11-28).
        "engine-facade-action-keeps-the-backoff",
        "engine",
        "orchestrator/engine/facade.py",
        "session, job, decision, JobChanges(next_attempt_at=None), now=self.clock()",
        "session, job, decision, now=self.clock()",
        (
            "tests/orchestrator/engine/test_facade.py::test_an_action_hands_back_the_job_as_it_"
            "now_is_and_a_resume_is_looked_at_at_once",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # The embedded loop dies with the first tick that raises: `baton serve` answers on, but
        # no job is reconciled again until it restarts.
        "engine-loop-dies-on-a-failed-tick",
        "engine",
        "orchestrator/engine/reconcile_loop.py",
        "            try:\n                self.engine.reconcile_all()\n"
        "            except Exception:  # the loop must outlive one bad tick; the error is logged\n"
        '                log.exception("reconcile tick failed")\n',
        "            self.engine.reconcile_all()\n",
        (
            "tests/orchestrator/engine/test_reconcile_loop.py::test_the_loop_ticks_on_start_and_"
            "at_each_wake_and_outlives_a_failed_tick",
        ),
        guarantee="error contract",
        ci=True,
    ),
    Mutant(
        # Kaggle's phone-verification refusal ("... try again.") taken for a passing one: the
        # job waits and pushes again every tick instead of telling its owner what to fix.
        "kaggle-kernels-phone-refusal-deferred",
        "kaggle",
        "worker/kaggle_access/kernels.py",
        "            if _PHONE.search(response.error):\n"
        "                raise AccountRefused(phone_reason(response.error))\n",
        "",
        (
            "tests/worker/kaggle_access/test_kernels.py::test_an_account_without_phone_"
            "verification_is_told_how_to_fix_it_then_the_slug_is_a_shell",
        ),
        guarantee="Kaggle first contact",
        ci=True,
    ),
    Mutant(
        # A version's status read without its label: Kaggle answers for the latest version, so
        # an earlier segment reads as its successor's session.
        "kaggle-kernels-status-of-the-latest-version",
        "kaggle",
        "worker/kaggle_access/kernels.py",
        "        request.version_label = version_label(version)\n        response = self.account",
        "        request.version_label = None\n        response = self.account",
        (
            "tests/worker/kaggle_access/test_kernels.py::test_a_failed_or_cut_version_reads_as_"
            "such_with_kaggles_message",
        ),
        guarantee="self-chaining",
        ci=True,
    ),
    # --- Sweep round 2026-11-28 (sweepk): the local backend, its sessions and their supervisor
    # (run here, not by mutmut: the supervisor runs detached as `python -m`, where mutmut's
    # trampolines never switch a mutant on; this runner puts its copy on the sessions'
    # PYTHONPATH), and the engine's clip and active segment.
    Mutant(
        # The supervisor never looks at the clock: a session runs past its hard limit until it
        # ends by itself, as if the orchestrator's backstop were the only limit.
        "local-supervisor-ignores-the-limit",
        "local backend",
        "orchestrator/backends/local*",
        "    while time.monotonic() < deadline and not requests.cancel:",
        "    while not requests.cancel:",
        (f"{LOCAL_SESSIONS}::test_a_session_over_its_limit_is_killed_and_loses_its_output",),
        ci=True,
    ),
    Mutant(
        # SIGTERM at the limit but no SIGKILL after the grace: a session that ignores SIGTERM
        # (the worker does until its handler is in place) runs on past its limit.
        "local-supervisor-no-sigkill-after-the-grace",
        "local backend",
        "orchestrator/backends/local*",
        "                killed = True\n                _signal_group(proc.pid, signal.SIGKILL)\n",
        "                killed = True\n",
        (f"{LOCAL_SESSIONS}::test_a_session_over_its_limit_is_killed_and_loses_its_output",),
        ci=True,
    ),
    Mutant(
        # A session cut at its limit keeps its output (Kaggle's way, which the local backend
        # does not follow): a half-written working/ would be collected.
        "local-supervisor-keeps-output-at-the-limit",
        "local backend",
        "orchestrator/backends/local*",
        "    dropped = (timed_out and not plan.keep_output_on_timeout) or requests.cancel",
        "    dropped = requests.cancel",
        (f"{LOCAL_SESSIONS}::test_a_session_over_its_limit_is_killed_and_loses_its_output",),
        ci=True,
    ),
    Mutant(
        # SIGTERM to the supervisor no longer cancels: a cancelled job's session trains on.
        "local-supervisor-cancel-ignored",
        "local backend",
        "orchestrator/backends/local*",
        "        self.cancel = True",
        "        self.cancel = False",
        (
            f"{LOCAL_SESSIONS}::test_a_cancel_during_start_up_is_not_lost",
            f"{LOCAL_BACKEND}::test_a_cancelled_session_is_killed_and_says_so",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # A launch hands the session a limit other than its segment's: the session is cut later
        # than the planner sized it for (the deadline rule's clock and the hard limit disagree).
        "local-launch-limit-not-the-segments",
        "local backend",
        "orchestrator/backends/local*",
        "            limit_seconds=spec.limit_seconds,",
        "            limit_seconds=spec.limit_seconds * 2,",
        (
            f"{LOCAL_BACKEND}::test_a_launch_runs_the_worker_under_the_segments_limit_with_the_trainer_"
            "paths_first",
        ),
        ci=True,
    ),
    Mutant(
        # A supervisor still starting (it holds the launch lock, has no pid file yet) counts as
        # not started: its directory is cleared and the segment launched a second time.
        "local-sessions-starting-supervisor-not-found",
        "local backend",
        "orchestrator/backends/local*",
        "        if _launch_in_progress(root):\n            return SessionState.RUNNING\n",
        "",
        (
            f"{LOCAL_SESSIONS}::test_a_starting_supervisor_is_found_before_it_has_written_its_pid",
            f"{LOCAL_BACKEND}::test_a_launch_id_being_launched_elsewhere_is_not_launched_again_until_that_"
            "launch_died",
        ),
        guarantee="no duplicate launch",
        ci=True,
    ),
    Mutant(
        # The supervisor stays in its launcher's process group: stopping the orchestrator with
        # its group (Ctrl-C, a service manager) kills every session it started.
        "local-sessions-supervisor-in-the-launchers-group",
        "local backend",
        "orchestrator/backends/local*",
        "            start_new_session=True,\n            pass_fds=(lock_fd,),\n",
        "            pass_fds=(lock_fd,),\n",
        (f"{LOCAL_SESSIONS}::test_a_session_outlives_the_process_group_that_launched_it",),
        ci=True,
    ),
    # --- Sweep round 2026-11-28b (sweepo): the supervisor's detached process, run under mutmut
    # by tests/mutation/detached.py.
    Mutant(
        # A session inherits the orchestrator's whole environment: its tokens and keys reach
        # the trainer's code, which may log them.
        "local-supervisor-session-inherits-the-orchestrators-secrets",
        "local backend",
        "orchestrator/backends/local*",
        "    env = {**_base_environment(), **plan.env}",
        "    env = {**os.environ, **plan.env}",
        (
            f"{LOCAL_SESSIONS}::test_a_session_gets_only_its_plans_environment_and_folder_and_its_files_are_private",
        ),
        guarantee="no secret leaks",
        ci=True,
    ),
    Mutant(
        # The supervisor writes `pause` for a session nobody asked to stop: every segment
        # commits at its first step boundary and ends.
        "local-supervisor-pauses-unasked",
        "local backend",
        "orchestrator/backends/local*",
        "        if requests.stop and not stop_written:",
        "        if not stop_written:",
        (
            f"{LOCAL_SESSIONS}::test_a_session_gets_only_its_plans_environment_and_folder_and_its_files_are_private",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # The texts the engine stores are no longer clipped: a backend's long error reaches the
        # database whole.
        "engine-text-clip-keeps-everything",
        "engine",
        "orchestrator/engine/text.py",
        '    return text[: limit - 1] + "\u2026"',
        "    return text",
        (
            "tests/orchestrator/engine/test_text.py",
            "tests/orchestrator/engine/test_decisions.py",
        ),
        ci=True,
    ),
    Mutant(
        # Any segment of the job counts as its running one, an ended one included: a job whose
        # last segment ended is watched again instead of launching its next.
        "engine-active-segment-of-any-state",
        "engine",
        "orchestrator/engine/segments.py",
        "            Segment.state.in_([state.value for state in ACTIVE_SEGMENT_STATES]),\n",
        "",
        ("tests/orchestrator/engine/test_watch.py",),
        guarantee="lifecycle",
        ci=True,
    ),
    Mutant(
        # A phase that says nothing of `again` asks for another phase at once, in the same visit:
        # a running session is asked its status three times a look (three Kaggle API calls).
        "engine-revisit-again-by-default",
        "engine",
        "orchestrator/engine/revisit.py",
        "    again: bool = False",
        "    again: bool = True",
        (
            "tests/orchestrator/engine/test_facade.py::test_a_running_session_is_asked_its_status_"
            "once_a_look_at_the_backends_pace",
        ),
        ci=True,
    ),
    Mutant(
        "engine-context-local-fallback-by-default",
        "engine",
        "orchestrator/engine/context.py",
        "    allow_local_fallback: bool = False",
        "    allow_local_fallback: bool = True",
        ("tests/orchestrator/engine/test_quota_fallback.py",),
        equivalent="the facade, the one place a Context is built, always passes the operator's "
        "setting (`kaggle.on_quota_exhausted: local` needs `allow_local_fallback`), so the "
        "default is never read",
    ),
    Mutant(
        # A pause asked after a cancel that Kaggle has not taken yet replaces it: the segment
        # commits and the job can be resumed instead of ending cancelled.
        "kaggle-control-pause-overrides-a-pending-cancel",
        "kaggle",
        "orchestrator/backends/kaggle/control.py",
        "        if pending == Pending(Command.CANCEL, launch_id):\n            return\n",
        "",
        (
            "tests/orchestrator/backends/kaggle/test_control_channel.py::test_a_pause_after_a_"
            "cancel_not_yet_written_leaves_the_cancel_to_be_written",
        ),
        guarantee="pause and cancel",
        ci=True,
    ),
    Mutant(
        # The operator's trainer directories (BATON_TRAINER_PATHS) not searched when the kernel's
        # code is packed: a trainer submit found cannot be embedded, or a package of the same
        # name on the orchestrator's own import path travels in its place.
        "kaggle-packaging-ignores-the-trainer-paths",
        "kaggle",
        "orchestrator/backends/kaggle/packaging.py",
        "    found = PathFinder.find_spec(top, [str(path) for path in search_path]) if search_path "
        "else None\n",
        "    found = None\n",
        (
            "tests/orchestrator/backends/kaggle/test_packaging.py::test_the_operators_package_is_"
            "embedded_not_one_of_the_same_name_on_the_import_path",
        ),
        ci=True,
    ),
    Mutant(
        # The job's dataset found with its first version processing and no record of sending it
        # (a create whose answer was lost, a restored data dir): sent again instead of adopted.
        "kaggle-checkpoints-processing-first-version-not-adopted",
        "kaggle",
        "worker/kaggle_access/checkpoints.py",
        "        if first_processing and not uploads:\n",
        "        if False:\n",
        (
            "tests/worker/kaggle_access/test_checkpoints.py::test_a_first_version_found_"
            "processing_without_a_record_is_adopted_never_sent_again",
        ),
        guarantee="Kaggle first contact",
        ci=True,
    ),
    # --- sweep round 2026-11-28 (sweepn): the Kaggle backend's own module -----------------------
    Mutant(
        # An accepted push after a refused one is not recorded: two GetKernel 500s then take the
        # slug for a shell, `find` answers that nothing runs, and the segment is pushed again.
        "kaggle-backend-accepted-push-forgotten",
        "kaggle",
        "orchestrator/backends/kaggle/backend.py",
        "self.kernel_record.pushed(accepted=True)",
        "self.kernel_record.pushed(accepted=False)",
        (
            "tests/orchestrator/backends/kaggle/test_first_contact.py::test_a_slug_that_took_a_"
            "push_after_a_refused_one_is_never_taken_for_a_shell",
        ),
        guarantee="no duplicate launch",
        ci=True,
    ),
    Mutant(
        # A finished job's datasets are left on Kaggle: its checkpoints fill the account's
        # private storage after it is done.
        "kaggle-backend-finished-job-keeps-its-datasets",
        "kaggle",
        "orchestrator/backends/kaggle/backend.py",
        "                fetched += held\n"
        "                self._release_finished_job(final_dataset)\n",
        "                fetched += held\n",
        (
            "tests/orchestrator/backends/kaggle/test_retention.py::test_a_job_keeps_its_newest_"
            "checkpoint_datasets_and_once_finished_none",
        ),
        guarantee="retention when done",
        ci=True,
    ),
    Mutant(
        # Every session of a job that publishes its own checkpoint publishes into the job's one
        # dataset: the client deletes datasets, never versions, so retention can delete none of
        # its checkpoints and they fill the account's private storage.
        "kaggle-backend-kernel-publishes-every-checkpoint-to-one-dataset",
        "kaggle",
        "orchestrator/backends/kaggle/backend.py",
        "slug = checkpoint_slug(spec.job_id, spec.segment_index)",
        "slug = dataset_slug(spec.job_id)",
        (
            "tests/orchestrator/backends/kaggle/test_backend.py::test_a_segment_is_pushed_as_its_"
            "job_asks_and_its_kernel_told_what_it_was_promised",
        ),
        guarantee="retention when done",
        ci=True,
    ),
    Mutant(
        # A pinned checkpoint Kaggle would not mount is not recorded: every later segment names
        # its checkpoint pinned again, runs without it and is rejected, until the job fails.
        "kaggle-backend-refused-pin-not-recorded",
        "kaggle",
        "orchestrator/backends/kaggle/backend.py",
        "self.findings.update(pinned_sources=False)",
        "self.findings.update(pinned_sources=None)",
        (
            "tests/orchestrator/backends/kaggle/test_retention.py::test_an_account_that_refuses_"
            "pinned_versions_gets_each_checkpoint_named_unpinned_after_once",
        ),
        guarantee="Kaggle first contact",
        ci=True,
    ),
    # --- sweep round 2026-11-28b (sweepr): the embedded notifier loop --------------------------
    Mutant(
        # `baton serve`'s notifier thread ends at the first database error (a restart, a lost
        # connection): no webhook is posted again until the server restarts.
        "notifier-loop-ends-at-a-database-error",
        "notifier",
        "orchestrator/notifier.py",
        "            except SQLAlchemyError:  # the database away for a moment: the next pass",
        "            except ZeroDivisionError:  # the database away for a moment: the next pass",
        (
            "tests/orchestrator/test_notifier.py::test_a_pass_the_database_fails_is_followed_"
            "by_one_that_delivers",
        ),
        guarantee="webhook delivery",
        ci=True,
    ),
    Mutant(
        # A checkpoint left on Kaggle is fetched without hashing its files: a copy damaged on
        # Kaggle (same size, other bytes) replaces the stub and the next session resumes from it.
        "kaggle-backend-stub-fetched-unverified",
        "kaggle",
        "orchestrator/backends/kaggle/backend.py",
        "                verify_checkpoint(staging / CHECKPOINT_DIR, expect)\n",
        "                read_manifest(staging / CHECKPOINT_DIR).check_expected(expect)\n",
        (
            "tests/orchestrator/backends/kaggle/test_published_check.py::test_a_copy_that_fails_"
            "verification_never_replaces_the_stub",
        ),
        guarantee="changing backend",
        ci=True,
    ),
    Mutant(
        # A collect retried after the stub of a published checkpoint was kept forgets the
        # session's time spent publishing: the next segment is planned without that margin.
        "kaggle-backend-retried-collect-forgets-publishing",
        "kaggle",
        "orchestrator/backends/kaggle/backend.py",
        "                    result = _with_publish_time(result, seconds)\n",
        "                    pass\n",
        (
            "tests/orchestrator/backends/kaggle/test_retention.py::test_a_checkpoint_its_session_"
            "published_is_kept_as_a_stub_and_never_crosses_the_link",
        ),
        guarantee="learned estimates",
        ci=True,
    ),
)
