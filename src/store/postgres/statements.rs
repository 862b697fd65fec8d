//! The PostgreSQL dialect of every transition: one named statement each, named as SQLite's
//! (`Store::complete_if_owned` runs `COMPLETE_IF_OWNED`).
//!
//! Parameters are positional. Every statement guarded by a token binds it first, in the
//! same order: `$1` id, `$2` attempt, `$3` claim id, `$4` now; the statement's own values
//! follow from `$5`. Concurrency comes from row locks: a guarded `UPDATE` that waited for
//! another transaction's lock re-reads the row and evaluates its `WHERE` again on the
//! committed version (READ COMMITTED), so a guard never passes on a row that changed under
//! it.

/// The fence: the exact token of a running job whose lease is live at `$4`.
macro_rules! owned_by_token {
    () => {
        "id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'running' AND lease_until > $4"
    };
}

/// The settles' fence against a row another transaction holds: the row is locked as part
/// of the statement only if no other transaction holds it (`SKIP LOCKED`), and the
/// statement changes nothing otherwise, instead of waiting for the row and then judging the
/// lease by `$4`, an instant read before the wait. The caller tells the two misses apart by
/// the row's identity (a row that still holds the token's live claim was held), waits for
/// the row, reads the clock again and runs the statement once more (`queue/settle.rs`): a
/// lease is judged at an instant read while nobody else holds the row. A row this
/// transaction locked itself (`complete_with`'s `OWNED_LEASE`) is never skipped.
/// In the `SET` of a transition that may end the job's hold on its group: marks the group's
/// release due (for a job of a group), in the same statement as the transition, so that a
/// release lost after it is found by the reaper (`RELEASE_DUE_GROUPS`).
macro_rules! release_due {
    () => {
        "group_release_due = (group_name IS NOT NULL)"
    };
}

/// What a transition that may end a hold returns: whose group to release, if due.
macro_rules! group_returned {
    () => {
        "queue, group_name, group_release_due"
    };
}

/// In the `SET` of a transition that puts a job back to pending from a state that held no
/// claim (a replay, an operator's retry): a job of a group comes back held, and its release
/// (due at once) hands the group to it unless a job already holds the group.
macro_rules! reentry_held {
    () => {
        "group_held = (group_name IS NOT NULL), group_release_due = (group_name IS NOT NULL)"
    };
}

/// A live job of a group (`h`) that holds it: pending, running or waiting, and under the
/// queue's `stop` policy (the default) also `unknown` or exhausted and unacknowledged.
macro_rules! holds_group {
    () => {
        "NOT h.group_held
           AND h.state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted')
           AND (h.state IN ('pending', 'running', 'waiting')
                OR ((h.state = 'unknown' OR h.acknowledged_at IS NULL)
                    AND coalesce((SELECT group_policy FROM fenceq_queue_flow WHERE queue = h.queue), 'stop') = 'stop'))"
    };
}

/// A live job of a group (`h`) that a new arrival must wait behind: one that holds the group
/// (`holds_group!`), or one held back waiting its turn. The second matters where the group
/// has no holder while its release is due (a hand-over that failed after its settle
/// committed, or a process that died between the two): a job enqueued then must not jump
/// ahead of the jobs already waiting. The reaper's sweep hands the group on to the oldest.
macro_rules! queues_behind {
    () => {
        concat!(
            "((h.group_held AND h.state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted'))
                OR (",
            holds_group!(),
            "))"
        )
    };
}

macro_rules! unless_held_elsewhere {
    () => {
        " AND id = (SELECT id FROM fenceq_jobs
                    WHERE id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'running'
                    FOR UPDATE SKIP LOCKED)"
    };
}

/// What a transition that ends an attempt returns first (`moved`), for its record
/// (`records_attempt!`): the row's id, attempt, claim id and worker, which no such transition
/// changes, and the error text it stored as `last_error`.
macro_rules! attempt_returned {
    () => {
        "id, attempt, claim_id, worker, last_error"
    };
}

/// The history of attempts (`fenceq_attempts`, schema 19): a transition that ends an attempt
/// other than by completing it (`$moved`, an `UPDATE` whose `RETURNING` starts with
/// `attempt_returned!`) and, in the same statement, the record of each attempt it ended, with
/// `$outcome` (an SQL expression), started at the instant its claim id carries
/// (`fenceq_claim_instant`, schema 19), ended at `$now` (a parameter). A settle runs as one
/// statement in autocommit, so the record is a data-modifying CTE of that statement, not a
/// statement beside it. The statement returns `$returning` of every moved row.
macro_rules! records_attempt {
    ($moved:expr, $outcome:literal, $now:literal, $returning:expr) => {
        concat!(
            "WITH moved AS (",
            $moved,
            "),
    recorded AS (
        INSERT INTO fenceq_attempts (job_id, attempt, claim_id, outcome, worker, started_at, ended_at, error)
        SELECT id, attempt, claim_id, ",
            $outcome,
            ", worker, fenceq_claim_instant(claim_id), ",
            $now,
            ", last_error FROM moved)
    SELECT ",
            $returning,
            " FROM moved"
        )
    };
}

/// The settles that end a job as an unacknowledged exhaustion keeping its token (the
/// handler's, a retry out of attempts, a snooze past its cap), with the attempt's record:
/// `$error` the parameter of the error text, `$guard` what else must hold (`""` or a
/// condition followed by `AND`).
macro_rules! exhausts_owned {
    ($error:literal, $guard:literal) => {
        records_attempt!(
            concat!(
                "
    UPDATE fenceq_jobs
    SET    state = 'exhausted', lease_until = NULL, last_error = ",
                $error,
                ",
           settled_at = $4, exhausted_at = $4, acknowledged_at = NULL, ",
                release_due!(),
                "
    WHERE  ",
                $guard,
                owned_by_token!(),
                unless_held_elsewhere!(),
                "
    RETURNING ",
                attempt_returned!(),
                ", ",
                group_returned!()
            ),
            "'exhausted'",
            "$4",
            group_returned!()
        )
    };
}

/// The wake-up of every listener of this schema's queues (`listen.rs`): `NOTIFY` on the
/// schema's channel with the queue's name as payload, for a row the statement made due now.
/// Sent by the server when the transaction commits, and only then; repeats within one
/// transaction are folded into one. The listener computes the same channel on its own
/// connection (`CHANNEL`).
macro_rules! wake_listeners {
    ($queue:expr) => {
        concat!("pg_notify(left('fenceq_' || current_schema(), 63), ", $queue, ")::text")
    };
}

/// In a prune (`$ctes` of `counting_settled!`, after `moved`, whose `RETURNING` has each deleted
/// job's `id`): the deleted jobs' records of attempts, deleted in the same statement through
/// the records' key (schema 19). A job that completed at its first attempt has none.
macro_rules! forgets_attempts {
    () => {
        "forgotten AS (
    DELETE FROM fenceq_attempts WHERE job_id IN (SELECT id FROM moved))"
    };
}

/// A transition that moves rows into or out of a settled state, with the move of its counts
/// (`fenceq_settled_counts`, read by `STATS`) in the same statement: `$ctes` defines `moved`,
/// the transition (last, or followed by CTEs that only read it), whose `RETURNING` names each row's `counted_state` ('completed',
/// 'cancelled', 'acknowledged', or NULL for a row that moves no count) and `counted` (+1 or
/// -1). The statement then returns `$returning` of every moved row.
///
/// A settle never waits for another's count, as it never waits for another's job row
/// (`unless_held_elsewhere!`): a counter row stays locked until its transaction ends, so the
/// statement writes to a shard no other transaction holds. It takes the first shard, from a
/// random start, whose transaction-scoped advisory lock (keyed by the schema) it can take
/// without waiting; every writer of a count but the recount (which locks the table) holds the
/// shard's advisory lock until it ends. A transaction that holds one already gets its own
/// shard again. With all 64 taken, it waits for shard 0.
macro_rules! counting_settled {
    ($ctes:expr, $returning:expr) => {
        concat!(
            "WITH ",
            $ctes,
            ",
    counted AS (
        INSERT INTO fenceq_settled_counts AS c (queue, state, shard, count)
        SELECT queue, counted_state,
               coalesce((SELECT s FROM (SELECT (r.start + g) % 64 AS s
                                        FROM   (SELECT floor(random() * 64)::int AS start) AS r,
                                               generate_series(0, 63) AS g) AS shards
                         WHERE  pg_try_advisory_xact_lock(hashtext('fenceq settled counts ' || current_schema()), s)
                         LIMIT  1), 0)::smallint,
               sum(counted)
        FROM   moved
        WHERE  counted_state IS NOT NULL
        GROUP  BY queue, counted_state
        ORDER  BY queue, counted_state
        ON CONFLICT (queue, state, shard) DO UPDATE SET count = c.count + EXCLUDED.count)
    SELECT ",
            $returning,
            " FROM moved"
        )
    };
}

stmt! {
    /// The channel a listener of this connection's schema listens on (see `wake_listeners!`).
    CHANNEL = "SELECT left('fenceq_' || current_schema(), 63) AS channel";

    /// Idempotent intake through the unique index `fenceq_jobs_queue_key`: a conflict returns no
    /// row (and the caller looks the existing job up); any other violation fails loudly. A job
    /// due at once wakes the queue's listeners in every process (on commit).
    ENQUEUE = concat!(
        "
    INSERT INTO fenceq_jobs (queue, key, payload, priority, run_at, max_attempts, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, CASE WHEN run_at <= created_at THEN ",
        wake_listeners!("queue"),
        " END AS woke"
    );

    /// An intake group's rows, one statement that inserts all of them or none, so that it can
    /// run in autocommit: `ENQUEUE_ALL` without `ON CONFLICT`, so a key conflict (with a job
    /// already there, or between two of its rows) fails the statement on
    /// `fenceq_jobs_queue_key`; and fewer rows back than `$8` went in (an application's trigger
    /// ignored one) divides by zero, which fails it too. A failed statement changes nothing; when
    /// every row was ignored, nothing was inserted and no row comes back.
    ENQUEUE_ALL_OR_NONE = concat!(
        "
    WITH inserted AS (
        INSERT INTO fenceq_jobs (queue, key, payload, priority, run_at, max_attempts, created_at)
        SELECT queue, key, payload, priority, run_at, max_attempts, created_at
        FROM   unnest($1::text[], $2::text[], $3::bytea[], $4::integer[], $5::bigint[], $6::integer[], $7::bigint[])
               WITH ORDINALITY AS r(queue, key, payload, priority, run_at, max_attempts, created_at, n)
        ORDER  BY n
        RETURNING id, CASE WHEN run_at <= created_at THEN ",
        wake_listeners!("queue"),
        " END AS woke
    )
    SELECT id / ((SELECT count(*) FROM inserted) = $8)::integer AS id, woke FROM inserted"
    );

    /// Batched intake, one statement: the rows of seven parallel arrays (`ENQUEUE`'s columns),
    /// inserted in array order (so their ids, from the table's sequence, ascend in that order).
    /// A conflicting row is skipped, as in `ENQUEUE`; `Store::enqueue_all_new` then undoes the
    /// statement and goes row by row.
    ENQUEUE_ALL = concat!(
        "
    INSERT INTO fenceq_jobs (queue, key, payload, priority, run_at, max_attempts, created_at)
    SELECT queue, key, payload, priority, run_at, max_attempts, created_at
    FROM   unnest($1::text[], $2::text[], $3::bytea[], $4::integer[], $5::bigint[], $6::integer[], $7::bigint[])
           WITH ORDINALITY AS r(queue, key, payload, priority, run_at, max_attempts, created_at, n)
    ORDER  BY n
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, CASE WHEN run_at <= created_at THEN ",
        wake_listeners!("queue"),
        " END AS woke"
    );

    /// Batched intake with groups (`$8` each row's group, NULL for none), one statement, after
    /// `LOCK_GROUPS` took every group's lock in the same transaction: a grouped row is held
    /// when a job of its group already holds it or waits its turn (`queues_behind!`), or when
    /// an earlier row of the batch is in its group (the earliest of them holds it then, as one
    /// row at a time would have left it). A conflicting row is skipped, as in `ENQUEUE_ALL`,
    /// and the caller then goes row by row.
    ENQUEUE_ALL_GROUPED = concat!(
        "
    INSERT INTO fenceq_jobs (queue, key, payload, priority, run_at, max_attempts, created_at,
                             group_name, group_held)
    SELECT r.queue, r.key, r.payload, r.priority, r.run_at, r.max_attempts, r.created_at, r.group_name,
           r.group_name IS NOT NULL
           AND (r.n > min(r.n) OVER (PARTITION BY r.queue, r.group_name)
                OR EXISTS (SELECT 1 FROM fenceq_jobs AS h
                           WHERE h.queue = r.queue AND h.group_name = r.group_name AND ",
        queues_behind!(),
        "))
    FROM   unnest($1::text[], $2::text[], $3::bytea[], $4::integer[], $5::bigint[], $6::integer[], $7::bigint[],
                  $8::text[])
           WITH ORDINALITY AS r(queue, key, payload, priority, run_at, max_attempts, created_at, group_name, n)
    ORDER  BY r.n
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, CASE WHEN run_at <= created_at AND NOT group_held THEN ",
        wake_listeners!("queue"),
        " END AS woke"
    );

    /// The locks of every (queue `$1`, group `$2`) pair of a batch (`$3` now), taken in one
    /// order (sorted), so that two batches never wait for each other's groups in a circle.
    LOCK_GROUPS = "
    INSERT INTO fenceq_groups (queue, group_name, touched_at)
    SELECT DISTINCT q, g, $3::bigint FROM unnest($1::text[], $2::text[]) AS t(q, g)
    ORDER  BY q, g
    ON CONFLICT (queue, group_name) DO UPDATE SET touched_at = EXCLUDED.touched_at";

    FIND_BY_KEY = "
    SELECT id FROM fenceq_jobs WHERE queue = $1 AND key = $2";

    /// The claim of a queue with no limits, one call of the schema's `fenceq_claim`
    /// (`schema/postgres/0016_claim_function.sql`, where its rules are written out): up to `$3`
    /// claimable jobs of queue `$1` in priority, run_at, id order (due pending jobs, and running
    /// jobs whose lease ended at or before the claim's instant), locked and skipping rows
    /// another transaction holds, each claimed for worker `$4` with a fresh claim id and a
    /// lease `$5` ms long. A paused queue, one backing off, and one with limits claim nothing.
    ///
    /// The claim's instant is `$2` (ms), or, when `$2` is NULL, the server's clock read by the
    /// statement itself after its snapshot: a claim judged by the server's clock needs no round
    /// trip of its own to read it (see `time.rs`).
    ///
    /// A function rather than the statement inline: it keeps one generic plan per session,
    /// with sequential scans, bitmap scans and sorts priced out while it runs, so the server
    /// does not plan the claim on every call (the sessions plan the store's other statements for
    /// each call's values), and the kept plan cannot take the shape that reads every due row.
    /// Its rows come back in no particular order; the store sorts.
    CLAIM = "
    SELECT id, queue, key, payload, priority, run_at, attempt, max_attempts, lease_until, last_error,
           claim_id, group_name
    FROM   fenceq_claim($1, $2, $3, $4, $5)";

    /// `$5` is the new lease end (computed in Rust, saturating).
    RENEW_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    lease_until = $5, heartbeat_at = $4
    WHERE  ",
        owned_by_token!()
    );

    /// What an owned write checks first in its transaction: the exact token's live lease, with
    /// the row locked (`FOR UPDATE`) until the transaction ends, so that no claim, reap, cancel
    /// or settle of another transaction can change the job before this one commits (claims and
    /// reaps skip the locked row; the others wait for it).
    ///
    /// The row is locked when it holds the token's running claim, and the lease is judged on
    /// the version the lock returns: a `FOR UPDATE` guarded by the lease itself would judge the
    /// version from before a renewal written but not yet committed (a heartbeat round still
    /// renewing other jobs), skip the wait, and refuse a token that the renewal keeps owning a
    /// moment later. A token another claim replaced (committed) waits for nothing.
    ///
    /// The queue passes the earliest instant as `$4` and judges the returned lease itself, by
    /// an instant it reads once the statement returned (the row held): an instant bound before
    /// the statement would be stale by the time a wait for the row ended.
    OWNED_LEASE = "
    WITH locked AS (
        SELECT lease_until, heartbeat_at FROM fenceq_jobs
        WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'running'
        FOR UPDATE
    )
    SELECT lease_until, heartbeat_at FROM locked
    WHERE  lease_until > $4";

    /// An owned write's commit extends the lease from the commit by the claim's lease length
    /// (`$5`), guarded by the exact token and `running` (the lease was checked, and the row
    /// locked, by `OWNED_LEASE`).
    EXTEND_OWNED = "
    UPDATE fenceq_jobs
    SET    lease_until = $5, heartbeat_at = $4
    WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'running' AND lease_until < $5";

    OWNS = concat!(
        "SELECT count(*) AS n FROM fenceq_jobs
    WHERE  ",
        owned_by_token!()
    );

    COMPLETE_IF_OWNED = counting_settled!(
        concat!(
            "moved AS (
    UPDATE fenceq_jobs
    SET    state = 'completed', lease_until = NULL, settled_at = $4, ",
            release_due!(),
            "
    WHERE  ",
            owned_by_token!(),
            unless_held_elsewhere!(),
            "
    RETURNING ",
            group_returned!(),
            ", 'completed' AS counted_state, 1 AS counted)"
        ),
        group_returned!()
    );

    /// Every exact live claim of the arrays `$1` ids, `$2` attempts, `$3` claim ids (at `$4`)
    /// completed in one statement, returning the tokens that completed their rows (a token listed
    /// twice matches its row once). A row another transaction holds is skipped, as in
    /// `unless_held_elsewhere!`.
    ///
    /// Every row is read by its primary key. The running state is tested inside `CASE`, where
    /// the planner cannot match it to the partial index of running rows (`fenceq_jobs_lease`):
    /// with the test written plainly, it read that whole index and filtered it by id. Under an
    /// old snapshot (a transaction left open) that index keeps an entry for every job that ran
    /// since, which vacuum may not remove, and each settle then read them all.
    COMPLETE_MANY_IF_OWNED = counting_settled!(
        "moved AS (
    UPDATE fenceq_jobs AS j
    SET    state = 'completed', lease_until = NULL, settled_at = $4,
           group_release_due = (j.group_name IS NOT NULL)
    FROM   unnest($1::bigint[], $2::integer[], $3::uuid[]) AS t(id, attempt, claim_id)
    WHERE  j.id = t.id AND j.attempt = t.attempt AND j.claim_id = t.claim_id
      AND  CASE WHEN j.state = 'running' THEN j.lease_until > $4 ELSE false END
      AND  j.id IN (SELECT f.id FROM fenceq_jobs AS f
                    WHERE f.id = ANY($1) AND CASE WHEN f.state = 'running' THEN true ELSE false END
                    FOR UPDATE SKIP LOCKED)
    RETURNING j.id, j.attempt, j.claim_id, j.queue, j.group_name, j.group_release_due,
              'completed' AS counted_state, 1 AS counted)",
        "id, attempt, claim_id, queue, group_name, group_release_due"
    );

    /// Back to pending at `$5` with error `$6` while attempts are left (the constraint
    /// `pending_has_attempts_left` enforces it too), and the attempt's record.
    RETRY_IF_OWNED = records_attempt!(
        concat!(
            "
    UPDATE fenceq_jobs
    SET    state = 'pending', lease_until = NULL, run_at = $5, last_error = $6
    WHERE  attempt < max_attempts AND ",
            owned_by_token!(),
            unless_held_elsewhere!(),
            "
    RETURNING ",
            attempt_returned!(),
            ", CASE WHEN $5 <= $4 THEN ",
            wake_listeners!("queue"),
            " END AS woke"
        ),
        "'retry'",
        "$4",
        "woke"
    );

    EXHAUST_IF_OWNED = exhausts_owned!("$5", "");

    /// A retry out of attempts (`$5` the error): `EXHAUST_IF_OWNED` only when no attempt is
    /// left, so that a retry that skipped a held row never exhausts a job with attempts left.
    EXHAUST_OUT_OF_ATTEMPTS_IF_OWNED = exhausts_owned!("$5", "attempt >= max_attempts AND ");

    /// The evidence `$5` stored, and the attempt's record.
    MARK_UNKNOWN_IF_OWNED = records_attempt!(
        concat!(
            "
    UPDATE fenceq_jobs
    SET    state = 'unknown', lease_until = NULL, last_error = $5, settled_at = $4, ",
            release_due!(),
            "
    WHERE  ",
            owned_by_token!(),
            unless_held_elsewhere!(),
            "
    RETURNING ",
            attempt_returned!(),
            ", ",
            group_returned!()
        ),
        "'unknown'",
        "$4",
        group_returned!()
    );

    /// Parked until `$5` with reason `$6`, and the attempt's record.
    PARK_IF_OWNED = records_attempt!(
        concat!(
            "
    UPDATE fenceq_jobs
    SET    state = 'waiting', lease_until = NULL, wait_until = $5, last_error = $6
    WHERE  ",
            owned_by_token!(),
            unless_held_elsewhere!(),
            "
    RETURNING ",
            attempt_returned!()
        ),
        "'parked'",
        "$4",
        "id"
    );

    /// A claim handed back unstarted: pending and due at once, its attempt given back by raising
    /// the budget, not by lowering the counter (the next claim must be a new attempt, so that no
    /// (id, attempt) is handed out twice). `run_at` never moves later, so a job due before keeps
    /// its place in the claim order. It is due now: the queue's listeners are woken.
    RELEASE_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', lease_until = NULL, run_at = LEAST(run_at, $4),
           max_attempts = max_attempts + 1
    WHERE  ",
        owned_by_token!(),
        "
    RETURNING ",
        wake_listeners!("queue"),
        " AS woke"
    );

    /// One more attempt for the resumed work; refused once the deadline has passed, whether or
    /// not the reaper has run.
    RESUME_IF_WAITING = concat!(
        "
    UPDATE fenceq_jobs
    SET    state = 'pending', wait_until = NULL, run_at = $4, max_attempts = max_attempts + 1
    WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'waiting' AND wait_until > $4
    RETURNING ",
        wake_listeners!("queue"),
        " AS woke"
    );

    /// Idempotent: a repeat changes nothing, not even the recorded decision (`$5` decision, `$6`
    /// by, `$7` note), nor the count of acknowledged rows. The row is locked first (`old`), so
    /// that whether it was acknowledged before is read from the version this statement changes.
    ACKNOWLEDGE_IF_EXHAUSTED = counting_settled!(
        concat!(
            "old AS (
    SELECT id, acknowledged_at IS NULL AS unacknowledged FROM fenceq_jobs
    WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'exhausted'
    FOR UPDATE),
    moved AS (
    UPDATE fenceq_jobs AS j
    SET    acknowledged_at = coalesce(j.acknowledged_at, $4), ",
            release_due!(),
            ",
           decision      = CASE WHEN j.acknowledged_at IS NULL THEN $5 ELSE j.decision END,
           decided_at    = CASE WHEN j.acknowledged_at IS NULL THEN $4 ELSE j.decided_at END,
           decided_by    = CASE WHEN j.acknowledged_at IS NULL THEN $6 ELSE j.decided_by END,
           decision_note = CASE WHEN j.acknowledged_at IS NULL THEN $7 ELSE j.decision_note END
    FROM   old
    WHERE  j.id = old.id AND j.attempt = $2 AND j.claim_id = $3 AND j.state = 'exhausted'
    RETURNING j.queue, j.group_name, j.group_release_due,
              CASE WHEN old.unacknowledged THEN 'acknowledged' END AS counted_state, 1 AS counted)"
        ),
        group_returned!()
    );

    RESOLVE_COMPLETE_IF_UNKNOWN = counting_settled!(
        concat!(
            "moved AS (
    UPDATE fenceq_jobs
    SET    state = 'completed', settled_at = $4, ",
            release_due!(),
            ",
           decision = $5, decided_at = $4, decided_by = $6, decision_note = $7
    WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'unknown'
    RETURNING ",
            group_returned!(),
            ", 'completed' AS counted_state, 1 AS counted)"
        ),
        group_returned!()
    );

    /// An operator's retry grants one attempt when none are left.
    RESOLVE_RETRY_IF_UNKNOWN = concat!(
        "
    UPDATE fenceq_jobs
    SET    state = 'pending', run_at = $4, settled_at = NULL, ",
        reentry_held!(),
        ",
           max_attempts = greatest(max_attempts, attempt + 1),
           decision = $5, decided_at = $4, decided_by = $6, decision_note = $7
    WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'unknown'
    RETURNING ",
        wake_listeners!("queue"),
        " AS woke, ",
        group_returned!()
    );

    RESOLVE_EXHAUST_IF_UNKNOWN = concat!(
        "
    UPDATE fenceq_jobs
    SET    state = 'exhausted', settled_at = $4, exhausted_at = $4, acknowledged_at = NULL, ",
        release_due!(),
        ",
           decision = $5, decided_at = $4, decided_by = $6, decision_note = $7
    WHERE  id = $1 AND attempt = $2 AND claim_id = $3 AND state = 'unknown'
    RETURNING ",
        group_returned!()
    );
}

// Operators' changes by id: `$1` id, `$2` now, `$3` decision, `$4` by, `$5` note.

stmt! {
    ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED = counting_settled!(
        concat!(
            "moved AS (
    UPDATE fenceq_jobs
    SET    acknowledged_at = $2, decision = $3, decided_at = $2, decided_by = $4, decision_note = $5, ",
            release_due!(),
            "
    WHERE  id = $1 AND state = 'exhausted' AND acknowledged_at IS NULL
    RETURNING ",
            group_returned!(),
            ", 'acknowledged' AS counted_state, 1 AS counted)"
        ),
        group_returned!()
    );

    /// A held job cancelled ends no hold (the expressions of `SET` read the row as it was), so
    /// its release is not due: cancelling a held job never waits for its group's lock.
    CANCEL_IF_ACTIVE = counting_settled!(
        concat!(
            "moved AS (
    UPDATE fenceq_jobs
    SET    state = 'cancelled', lease_until = NULL, wait_until = NULL, settled_at = $2,
           group_release_due = (group_name IS NOT NULL AND NOT group_held), group_held = false,
           decision = $3, decided_at = $2, decided_by = $4, decision_note = $5
    WHERE  id = $1 AND state IN ('pending', 'waiting', 'running')
    RETURNING ",
            group_returned!(),
            ", 'cancelled' AS counted_state, 1 AS counted)"
        ),
        group_returned!()
    );

    /// Dead-letter redrive: a fresh attempt budget (and snooze count), due now (waking the
    /// queue's listeners); the claim id keeps old tokens dead. The row is locked first (`old`),
    /// so that whether it leaves the count of acknowledged rows is read from the version this
    /// statement changes.
    REPLAY_IF_EXHAUSTED = counting_settled!(
        concat!(
            "old AS (
    SELECT id, acknowledged_at IS NOT NULL AS acknowledged FROM fenceq_jobs
    WHERE  id = $1 AND state = 'exhausted'
    FOR UPDATE),
    moved AS (
    UPDATE fenceq_jobs AS j
    SET    state = 'pending', attempt = 0, snoozes = 0, run_at = $2, settled_at = NULL,
           exhausted_at = NULL, acknowledged_at = NULL, ",
            reentry_held!(),
            ",
           decision = $3, decided_at = $2, decided_by = $4, decision_note = $5
    FROM   old
    WHERE  j.id = old.id AND j.state = 'exhausted'
    RETURNING ",
            wake_listeners!("j.queue"),
            " AS woke, j.queue, j.group_name, j.group_release_due,
              CASE WHEN old.acknowledged THEN 'acknowledged' END AS counted_state, -1 AS counted)"
        ),
        concat!("woke, ", group_returned!())
    );

    /// Every unacknowledged exhaustion of queue `$1` (`$2` now, `$3` decision, `$4` by, `$5` note).
    ACKNOWLEDGE_ALL = counting_settled!(
        "moved AS (
    UPDATE fenceq_jobs
    SET    acknowledged_at = $2, decision = $3, decided_at = $2, decided_by = $4, decision_note = $5,
           group_release_due = (group_name IS NOT NULL)
    WHERE  queue = $1 AND state = 'exhausted' AND acknowledged_at IS NULL
    RETURNING id, queue, group_name, group_release_due, 'acknowledged' AS counted_state, 1 AS counted)",
        "id, queue, group_name, group_release_due"
    );

    /// Up to `$2` expired leases (at `$1`): back to pending with attempts left, else exhausted.
    /// Rows held by an owned write are skipped (`SKIP LOCKED`): that write extends the lease as
    /// it commits. The guard is repeated in the `UPDATE`, so a settle that committed first is
    /// never overwritten.
    ///
    /// Each reaped attempt is recorded (`lease_expired`, ended at `$1`) in the same statement,
    /// as `records_attempt!` records a settle's.
    REAP_EXPIRED = concat!(
        "
    WITH expired AS (
        SELECT id FROM fenceq_jobs
        WHERE  state = 'running' AND lease_until <= $1
        ORDER  BY id
        LIMIT  $2
        FOR UPDATE SKIP LOCKED
    ), moved AS (
    UPDATE fenceq_jobs AS j
    SET    state        = CASE WHEN j.attempt < j.max_attempts THEN 'pending' ELSE 'exhausted' END,
           run_at       = CASE WHEN j.attempt < j.max_attempts THEN $1 ELSE j.run_at END,
           exhausted_at = CASE WHEN j.attempt < j.max_attempts THEN NULL ELSE $1 END,
           settled_at   = CASE WHEN j.attempt < j.max_attempts THEN NULL ELSE $1 END,
           last_error   = 'lease expired (worker ' || j.worker || ')',
           lease_until  = NULL,
           group_release_due = (j.group_name IS NOT NULL AND j.attempt >= j.max_attempts)
    FROM   expired
    WHERE  j.id = expired.id AND j.state = 'running' AND j.lease_until <= $1
    RETURNING j.id, j.attempt, j.claim_id, j.worker, j.last_error,
              j.state, CASE WHEN j.attempt < j.max_attempts THEN ",
        wake_listeners!("j.queue"),
        " END AS woke, j.queue, j.group_name, j.group_release_due
    ), recorded AS (
        INSERT INTO fenceq_attempts (job_id, attempt, claim_id, outcome, worker, started_at, ended_at, error)
        SELECT id, attempt, claim_id, 'lease_expired', worker, fenceq_claim_instant(claim_id), $1, last_error
        FROM   moved)
    SELECT state, woke, queue, group_name, group_release_due FROM moved"
    );

    /// Parked jobs whose deadline passed (at `$1`, at most `$2`) are exhausted, never reclaimed;
    /// each is recorded (`wait_expired`, the parked attempt's second record) in the same
    /// statement.
    REAP_WAITING = "
    WITH expired AS (
        SELECT id FROM fenceq_jobs
        WHERE  state = 'waiting' AND wait_until <= $1
        ORDER  BY id
        LIMIT  $2
        FOR UPDATE SKIP LOCKED
    ), moved AS (
    UPDATE fenceq_jobs AS j
    SET    state = 'exhausted', wait_until = NULL, settled_at = $1, exhausted_at = $1,
           acknowledged_at = NULL,
           last_error = 'wait expired: ' || coalesce(j.last_error, 'no reason given'),
           group_release_due = (j.group_name IS NOT NULL)
    FROM   expired
    WHERE  j.id = expired.id AND j.state = 'waiting' AND j.wait_until <= $1
    RETURNING j.id, j.attempt, j.claim_id, j.worker, j.last_error,
              j.queue, j.group_name, j.group_release_due
    ), recorded AS (
        INSERT INTO fenceq_attempts (job_id, attempt, claim_id, outcome, worker, started_at, ended_at, error)
        SELECT id, attempt, claim_id, 'wait_expired', worker, fenceq_claim_instant(claim_id), $1, last_error
        FROM   moved)
    SELECT queue, group_name, group_release_due FROM moved";

    /// Returns how many rows it deleted (`n`). The deleted jobs' records of attempts go in
    /// the same statement (`forgotten`, through the records' key).
    PRUNE_SETTLED = counting_settled!(
        concat!(
            "moved AS (
    DELETE FROM fenceq_jobs
    WHERE  id IN (SELECT id FROM fenceq_jobs
                  WHERE  state IN ('completed', 'cancelled') AND settled_at <= $1
                  LIMIT  $2)
      AND  state IN ('completed', 'cancelled') AND settled_at <= $1
    RETURNING id, queue, state AS counted_state, -1 AS counted),
    ",
            forgets_attempts!()
        ),
        "count(*) AS n"
    );

    /// Returns how many rows it deleted (`n`), and deletes their records, as `PRUNE_SETTLED`.
    PRUNE_ACKNOWLEDGED = counting_settled!(
        concat!(
            "moved AS (
    DELETE FROM fenceq_jobs
    WHERE  id IN (SELECT id FROM fenceq_jobs
                  WHERE  state = 'exhausted' AND acknowledged_at IS NOT NULL AND acknowledged_at <= $1
                  LIMIT  $2)
      AND  state = 'exhausted' AND acknowledged_at IS NOT NULL AND acknowledged_at <= $1
    RETURNING id, queue, 'acknowledged' AS counted_state, -1 AS counted),
    ",
            forgets_attempts!()
        ),
        "count(*) AS n"
    );

    EXHAUSTIONS = "
    SELECT id, attempt, claim_id, queue, key, payload, last_error AS reason, exhausted_at AS at
    FROM   fenceq_jobs
    WHERE  state = 'exhausted' AND acknowledged_at IS NULL AND id > $1
    ORDER  BY id
    LIMIT  $2";

    UNKNOWNS = "
    SELECT id, attempt, claim_id, queue, key, payload, last_error AS reason, settled_at AS at
    FROM   fenceq_jobs
    WHERE  state = 'unknown' AND id > $1
    ORDER  BY id
    LIMIT  $2";

    JOB = concat!(
        "
    SELECT ",
        job_columns!(),
        "
    FROM   fenceq_jobs
    WHERE  id = $1"
    );

    /// Up to `$2` records of job `$1`'s attempts, newest first (the records' key read
    /// backwards: `seq` rises with every record).
    ATTEMPTS = "
    SELECT attempt, claim_id, outcome, worker, started_at, ended_at, error
    FROM   fenceq_attempts
    WHERE  job_id = $1
    ORDER  BY seq DESC
    LIMIT  $2";

    /// Jobs in id order after `$1`, optionally of queue `$2` and state `$3`, at most `$4`.
    LIST = concat!(
        "
    SELECT ",
        job_columns!(),
        "
    FROM   fenceq_jobs
    WHERE  id > $1
      AND  ($2::text IS NULL OR queue = $2)
      AND  ($3::text IS NULL OR state = $3)
    ORDER  BY id
    LIMIT  $4"
    );

    /// What a reap pass would change at `$1` (for dry runs).
    REAP_PREVIEW = "
    SELECT count(*) FILTER (WHERE attempt < max_attempts) AS requeued,
           count(*) FILTER (WHERE attempt >= max_attempts) AS exhausted,
           (SELECT count(*) FROM fenceq_jobs WHERE state = 'waiting' AND wait_until <= $1) AS waits_expired
    FROM   fenceq_jobs
    WHERE  state = 'running' AND lease_until <= $1";

    /// Due pending jobs and running jobs of queue `$1` at `$2` (a pool's `wait_idle`). A paused
    /// queue's pending jobs are not due: no claim takes them until it is unpaused (the `CASE`
    /// skips counting them); nor are those of a queue backing off, until its back-off ends.
    DUE_OR_RUNNING = "
    SELECT CASE WHEN EXISTS (SELECT 1 FROM fenceq_queues WHERE queue = $1 AND paused_at IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM fenceq_queue_flow WHERE queue = $1 AND backoff_until > $2)
                THEN 0
                ELSE (SELECT count(*) FROM fenceq_jobs WHERE queue = $1 AND state = 'pending' AND NOT group_held AND run_at <= $2)
           END
         + (SELECT count(*) FROM fenceq_jobs WHERE queue = $1 AND state = 'running') AS n";

    /// A periodic job's tick `$2` of schedule `$1` is recorded (at `$3`) only when it is later
    /// than the recorded one (one row affected when it was): the upsert's `WHERE` leaves an
    /// equal or later tick alone, and a racing upsert waits for the first one's row lock and
    /// re-evaluates it on the committed row, so exactly one of several racing transactions wins.
    /// A row its registration made has no tick yet, and takes any. The next tick `$4` is
    /// recorded with the tick, for the processes that cannot compute it.
    ADVANCE_SCHEDULE_IF_LATER = "
    INSERT INTO fenceq_schedules AS s (name, last_tick, enqueued_at, next_tick, recorded_at)
    VALUES ($1, $2, $3, $4, $3)
    ON CONFLICT (name) DO UPDATE
    SET    last_tick = excluded.last_tick, enqueued_at = excluded.enqueued_at,
           next_tick = excluded.next_tick, recorded_at = excluded.recorded_at
    WHERE  s.last_tick IS NULL OR excluded.last_tick > s.last_tick";

    SCHEDULE_LAST_TICK = "
    SELECT last_tick AS n FROM fenceq_schedules WHERE name = $1 AND last_tick IS NOT NULL";

    /// A registration records what schedule `$1` is (`$2` definition, `$3` queue, `$4` next
    /// tick, `$5` now; the latest one under the name wins) and leaves its latest tick alone.
    RECORD_SCHEDULE = "
    INSERT INTO fenceq_schedules AS s (name, definition, queue, next_tick, recorded_at)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (name) DO UPDATE
    SET    definition = excluded.definition, queue = excluded.queue,
           next_tick = excluded.next_tick, recorded_at = excluded.recorded_at";

    /// Every schedule, by name in byte order (as `PAUSED_QUEUES`).
    SCHEDULES = "
    SELECT name, definition, queue, last_tick, next_tick, recorded_at
    FROM   fenceq_schedules
    ORDER  BY name COLLATE \"C\"";
}

// Paused queues: `$1` queue, `$2` now, `$3` decision, `$4` by, `$5` note.

stmt! {
    /// Pauses a queue (a queue exists by name: its first pause makes its row). A repeat while it
    /// is paused changes nothing, not even the record of who paused it (no row affected: the
    /// upsert's `WHERE` skips the update).
    PAUSE_QUEUE = "
    INSERT INTO fenceq_queues AS q (queue, paused_at, decision, decided_at, decided_by, decision_note)
    VALUES ($1, $2, $3, $2, $4, $5)
    ON CONFLICT (queue) DO UPDATE
    SET    paused_at = excluded.paused_at, decision = excluded.decision, decided_at = excluded.decided_at,
           decided_by = excluded.decided_by, decision_note = excluded.decision_note
    WHERE  q.paused_at IS NULL";

    /// Unpauses a paused queue, recording who did and why in place of the pause. A queue that
    /// is not paused is left alone.
    UNPAUSE_QUEUE = concat!(
        "
    UPDATE fenceq_queues
    SET    paused_at = NULL, decision = $3, decided_at = $2, decided_by = $4, decision_note = $5
    WHERE  queue = $1 AND paused_at IS NOT NULL
    RETURNING ",
        wake_listeners!("queue"),
        " AS woke"
    );

    /// One queue's pause, while it is paused.
    QUEUE_PAUSE = "
    SELECT queue, paused_at, decided_by, decision_note
    FROM   fenceq_queues
    WHERE  queue = $1 AND paused_at IS NOT NULL";

    /// Every paused queue, by name in byte order (`COLLATE "C"`: SQLite's and Rust's order,
    /// whatever the database's collation).
    PAUSED_QUEUES = "
    SELECT queue, paused_at, decided_by, decision_note
    FROM   fenceq_queues
    WHERE  paused_at IS NOT NULL
    ORDER  BY queue COLLATE \"C\"";

    /// Completions per minute in `$1..$2`, through the settled jobs' partial index.
    COMPLETIONS_PER_MINUTE = "
    SELECT settled_at / 60000 AS minute, count(*) AS n
    FROM   fenceq_jobs
    WHERE  state IN ('completed', 'cancelled') AND state = 'completed'
           AND settled_at >= $1 AND settled_at < $2
    GROUP  BY minute
    ORDER  BY minute";

    /// What a prune pass would delete at horizon `$1` (for dry runs).
    PRUNE_PREVIEW = "
    SELECT (SELECT count(*) FROM fenceq_jobs
            WHERE state IN ('completed', 'cancelled') AND settled_at <= $1) AS settled,
           (SELECT count(*) FROM fenceq_jobs
            WHERE state = 'exhausted' AND acknowledged_at IS NOT NULL AND acknowledged_at <= $1) AS acknowledged";

    /// Why a guarded write changed nothing: the row's current identity and state.
    IDENTITY = "
    SELECT state, attempt, claim_id, lease_until, wait_until FROM fenceq_jobs WHERE id = $1";

    /// The live states counted from their rows, each read through its own partial index (the
    /// settled rows, kept for days, are never read), and the settled states from their kept
    /// counts (`fenceq_settled_counts`). Held pending jobs of groups are counted from the
    /// groups' index, beside the claimable ones of the claim index.
    /// The first step of a recount: settles of other transactions wait from here to the end
    /// of the recount's transaction (each settle's statement takes its lock on the counts at
    /// its start, before it changes a row), so that the count of the rows that follows sees
    /// every settle that added to a count, and none adds to the counts it writes.
    LOCK_SETTLED_COUNTS = "LOCK TABLE fenceq_settled_counts IN EXCLUSIVE MODE";

    /// The counts replaced by a count of the rows, in shard 0 (as the upgrade writes them).
    /// Returns how many settled rows there are (`n`).
    RECOUNT_SETTLED = "
    WITH forgotten AS (DELETE FROM fenceq_settled_counts),
    counted AS (
        INSERT INTO fenceq_settled_counts (queue, state, shard, count)
        SELECT queue, CASE WHEN state = 'exhausted' THEN 'acknowledged' ELSE state END, 0, count(*)
        FROM   fenceq_jobs
        WHERE  state IN ('completed', 'cancelled') OR (state = 'exhausted' AND acknowledged_at IS NOT NULL)
        GROUP  BY 1, 2
        RETURNING count)
    SELECT coalesce(sum(count), 0)::bigint AS n FROM counted";

    /// The live states counted from their rows, the settled ones read from their kept counts
    /// (`$1` now, for the expired leases): a call of the schema's `fenceq_stats`, whose plan
    /// each session makes once with bitmap and sequential scans priced out
    /// (`schema/postgres/0017_stats_function.sql` says why), ordered by queue.
    STATS = "
    SELECT queue, state, acknowledged, count, min_run_at, expired
    FROM   fenceq_stats($1)
    ORDER  BY queue";
}

// Groups: `$1` queue, `$2` group unless said otherwise.

stmt! {
    /// Intake of a grouped job: as `ENQUEUE` (`$8` the group), held back when a job of its
    /// group already holds it or waits its turn (`queues_behind!`). Runs after `LOCK_GROUP` in
    /// the same transaction, so what it sees of the group cannot change before it commits.
    ENQUEUE_IN_GROUP = concat!(
        "
    INSERT INTO fenceq_jobs (queue, key, payload, priority, run_at, max_attempts, created_at,
                             group_name, group_held)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
            EXISTS (SELECT 1 FROM fenceq_jobs AS h WHERE h.queue = $1 AND h.group_name = $8 AND ",
        queues_behind!(),
        "))
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, CASE WHEN run_at <= created_at AND NOT group_held THEN ",
        wake_listeners!("queue"),
        " END AS woke"
    );

    /// The group's lock (`$3` now): every decision about who holds a group runs after it, in
    /// the same transaction, so two such decisions never interleave. The claim never takes it.
    LOCK_GROUP = "
    INSERT INTO fenceq_groups (queue, group_name, touched_at) VALUES ($1, $2, $3)
    ON CONFLICT (queue, group_name) DO UPDATE SET touched_at = EXCLUDED.touched_at";

    /// Hands the group to its held job with the smallest id unless a job holds it; the held
    /// job's state and hold are judged again as it is locked (a concurrent cancel), and the
    /// store then tries again. Wakes the queue's listeners when it hands the group on.
    RELEASE_GROUP = concat!(
        "
    UPDATE fenceq_jobs SET group_held = false
    WHERE id = (SELECT n.id FROM fenceq_jobs AS n
                WHERE n.queue = $1 AND n.group_name = $2 AND n.group_held
                  AND n.state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted')
                ORDER BY n.id LIMIT 1)
      AND group_held AND state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM fenceq_jobs AS h WHERE h.queue = $1 AND h.group_name = $2 AND ",
        holds_group!(),
        ")
    RETURNING ",
        wake_listeners!("queue"),
        " AS woke"
    );

    /// Whether the group has a held job and nothing that holds it (a release still to do).
    GROUP_NEEDS_RELEASE = concat!(
        "
    SELECT EXISTS (SELECT 1 FROM fenceq_jobs AS n
                   WHERE n.queue = $1 AND n.group_name = $2 AND n.group_held
                     AND n.state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted'))
       AND NOT EXISTS (SELECT 1 FROM fenceq_jobs AS h WHERE h.queue = $1 AND h.group_name = $2 AND ",
        holds_group!(),
        ") AS needed"
    );

    /// The release of the group is done: its marks are cleared.
    GROUP_RELEASED = "
    UPDATE fenceq_jobs SET group_release_due = false
    WHERE  queue = $1 AND group_name = $2 AND group_release_due";

    /// Up to `$1` groups whose release is due (lost after its transition: the reaper's sweep).
    RELEASE_DUE_GROUPS = "
    SELECT DISTINCT queue, group_name FROM fenceq_jobs WHERE group_release_due LIMIT $1";

    /// The groups of queue `$1` that have held jobs (for a change of its group policy).
    HELD_GROUPS = "
    SELECT DISTINCT group_name FROM fenceq_jobs
    WHERE  queue = $1 AND group_name IS NOT NULL AND group_held
      AND  state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted')";

    GROUP_POLICY = "
    SELECT group_policy FROM fenceq_queue_flow WHERE queue = $1";

    /// `$2` the policy, `$3` now.
    SET_GROUP_POLICY = "
    INSERT INTO fenceq_queue_flow (queue, group_policy, updated_at) VALUES ($1, $2, $3)
    ON CONFLICT (queue) DO UPDATE SET group_policy = EXCLUDED.group_policy, updated_at = EXCLUDED.updated_at";

    /// One page of groups with live jobs (`$1` queue or NULL for all, `$2`/`$3` the cursor's
    /// queue and group, `$4` limit), as SQLite's `GROUPS_PAGE`.
    GROUPS_PAGE = "
    SELECT g.queue, g.group_name, g.held, h.id AS head_id, h.state AS head_state, h.run_at AS head_run_at,
           h.wait_until AS head_wait_until, h.acknowledged_at AS head_acknowledged_at
    FROM (SELECT queue, group_name, count(*) FILTER (WHERE group_held) AS held,
                 coalesce(min(id) FILTER (WHERE NOT group_held AND state IN ('pending', 'running', 'waiting')),
                          min(id) FILTER (WHERE NOT group_held)) AS head
          FROM   fenceq_jobs
          WHERE  group_name IS NOT NULL
            AND  state IN ('pending', 'running', 'waiting', 'unknown', 'exhausted')
            AND  ($1::text IS NULL OR queue = $1)
            AND  (queue, group_name) > ($2, $3)
          GROUP  BY queue, group_name
          ORDER  BY queue, group_name
          LIMIT  $4) AS g
    LEFT JOIN fenceq_jobs AS h ON h.id = g.head
    ORDER BY g.queue, g.group_name";
}

// Limits: `$1` queue unless said otherwise.

stmt! {
    LIMITS = "
    SELECT scope, window_ms, max_count FROM fenceq_limits WHERE queue = $1 ORDER BY scope, window_ms";

    ALL_LIMITS = "
    SELECT queue, scope, window_ms, max_count FROM fenceq_limits ORDER BY queue, scope, window_ms";

    DELETE_LIMITS = "
    DELETE FROM fenceq_limits WHERE queue = $1";

    /// `$2` scope, `$3` window, `$4` count, `$5` now.
    INSERT_LIMIT = "
    INSERT INTO fenceq_limits (queue, scope, window_ms, max_count, updated_at) VALUES ($1, $2, $3, $4, $5)";

    /// The queue's flow-control row, created if missing (`$2` now): what `LOCK_LIMITS` locks.
    TOUCH_QUEUE_FLOW = "
    INSERT INTO fenceq_queue_flow (queue, updated_at) VALUES ($1, $2)
    ON CONFLICT (queue) DO UPDATE SET updated_at = EXCLUDED.updated_at";

    RUNNING_COUNT = "
    SELECT count(*) AS n FROM fenceq_jobs WHERE queue = $1 AND state = 'running'";

    /// The lock of the queue's flow-control row until the transaction ends, which serialises
    /// the claims of a limited queue across processes (the claim functions take it first): a
    /// limited claim takes it before it reads its instant, so that the instant it records as
    /// the start is not older than its wait for the lock. Returns a row per row locked.
    LOCK_QUEUE_FLOW = "
    SELECT 1::bigint AS n FROM fenceq_queue_flow WHERE queue = $1 FOR UPDATE";

    /// The queue's starts after `$2`, counted up to `$3` (the count stops there), and the
    /// `$3`-th latest of them when there are that many: the `CASE` runs that second read (an
    /// init plan) only for a full window, as SQLite's store reads it only then. The count
    /// reads latest first, the index's order, so that no `LIMIT` makes a sequential scan of
    /// the log look cheaper than the index.
    QUEUE_STARTS = "
    SELECT w.n,
           CASE WHEN w.n >= $3 THEN
               (SELECT at FROM fenceq_starts WHERE queue = $1 AND at > $2 ORDER BY at DESC OFFSET $3 - 1 LIMIT 1)
           END AS countth
    FROM  (SELECT count(*) AS n FROM (SELECT 1 FROM fenceq_starts WHERE queue = $1 AND at > $2
                                      ORDER BY at DESC LIMIT $3) AS s) AS w";

    /// The claim of a queue whose limits are queue-wide only, in one call of the schema's
    /// function (`schema/postgres/0009_limited_claim.sql`): `$1` queue, `$2` now, `$3` limit,
    /// `$4` worker, `$5` lease end, `$6` and `$7` the rate's count and window (NULL without a
    /// rate), `$8` the running limit (NULL without one).
    CLAIM_LIMITED = "
    SELECT id, queue, key, payload, priority, run_at, attempt, max_attempts, lease_until, last_error,
           claim_id, group_name
    FROM   fenceq_claim_limited($1, $2, $3, $4, $5, $6, $7, $8)";

    /// The claim of a queue with group rates, in one call of the schema's function
    /// (`schema/postgres/0014_grouped_claim.sql`): `CLAIM_LIMITED`'s eight, then `$9` and
    /// `$10` the group rates' counts and windows. A claim that took nothing may return one row
    /// of NULLs but `opens_at`, the instant a limit that held it back opens again.
    CLAIM_GROUPED = "
    SELECT id, queue, key, payload, priority, run_at, attempt, max_attempts, lease_until, last_error,
           claim_id, group_name, opens_at
    FROM   fenceq_claim_grouped($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

    /// Groups of queue `$1` with `$3` or more starts after `$2`, through the starts' group
    /// index.
    SPENT_GROUPS = "
    SELECT group_name FROM fenceq_starts
    WHERE  queue = $1 AND group_name IS NOT NULL AND at > $2
    GROUP  BY group_name HAVING count(*) >= $3";

    /// Of the groups in the array `$2`, the heads not due at `$3`: how many, and the earliest
    /// `run_at` (each group's head through the group index).
    DEFERRED_HEADS = "
    SELECT count(*) AS n, min(j.run_at) AS at FROM unnest($2::text[]) AS g(name)
    JOIN   fenceq_jobs AS j ON j.queue = $1 AND j.group_name = g.name AND NOT j.group_held
    WHERE  j.state = 'pending' AND j.run_at > $3";
}

// Snoozes and queue back-off.

stmt! {
    /// A snooze (`$5` run_at, `$6` reason, `$7` the cap): back to pending without spending an
    /// attempt, while the job was snoozed fewer than `$7` times, the attempt given back as
    /// `RELEASE_IF_OWNED` gives it back (the budget raised, the counter never lowered). A job
    /// due at once wakes the queue's listeners.
    ///
    /// The attempt is recorded with outcome `$8` (`snooze`, or `backoff` for a provider's
    /// back-off of the job's group or queue).
    SNOOZE_IF_OWNED = records_attempt!(
        concat!(
            "
    UPDATE fenceq_jobs
    SET    state = 'pending', lease_until = NULL, run_at = $5, last_error = $6,
           max_attempts = max_attempts + 1, snoozes = snoozes + 1
    WHERE  snoozes < $7 AND ",
            owned_by_token!(),
            unless_held_elsewhere!(),
            "
    RETURNING ",
            attempt_returned!(),
            ", CASE WHEN $5 <= $4 THEN ",
            wake_listeners!("queue"),
            " END AS woke"
        ),
        "$8",
        "$4",
        "woke"
    );

    /// A snooze past its cap (`$5` the cap, `$6` the error): a durable, unacknowledged
    /// exhaustion that keeps the token, only when the job was snoozed `$5` times or more.
    EXHAUST_PAST_SNOOZE_CAP_IF_OWNED = exhausts_owned!("$6", "snoozes >= $5 AND ");

    /// The back-off of job `$1`'s queue until `$2` (reason `$3`, now `$4`): a stored back-off that
    /// ends as late or later is kept (no row affected), so the back-off is the latest any
    /// handler asked for. A racing upsert waits for the first one's row lock and re-evaluates
    /// its `WHERE` on the committed row.
    BACK_OFF_QUEUE_OF = "
    INSERT INTO fenceq_queue_flow AS f (queue, backoff_until, backoff_reason, backoff_since, updated_at)
    SELECT queue, $2, $3, $4, $4 FROM fenceq_jobs WHERE id = $1
    ON CONFLICT (queue) DO UPDATE
    SET    backoff_until = excluded.backoff_until, backoff_reason = excluded.backoff_reason,
           backoff_since = excluded.backoff_since, updated_at = excluded.updated_at
    WHERE  f.backoff_until IS NULL OR f.backoff_until < excluded.backoff_until";

    /// One queue's back-off (`$1`), while it lasts at `$2`, and when it was set
    /// (`backoff_since`: `updated_at` moves with the row's other writes).
    QUEUE_BACKOFF = "
    SELECT queue, backoff_until, backoff_reason, backoff_since
    FROM   fenceq_queue_flow
    WHERE  queue = $1 AND backoff_until > $2";

    /// Every back-off that lasts at `$1`, by queue in byte order (as `PAUSED_QUEUES`).
    QUEUE_BACKOFFS = "
    SELECT queue, backoff_until, backoff_reason, backoff_since
    FROM   fenceq_queue_flow
    WHERE  backoff_until > $1
    ORDER  BY queue COLLATE \"C\"";

    /// Lifts queue `$1`'s back-off that lasts at `$2` (one row affected when there was one),
    /// recording the lift (`$3` by, `$4` note, the lifted reason the row's before the update)
    /// in place of the last one, and wakes the queue's listeners. The row stays: it also holds
    /// the queue's group policy.
    CLEAR_QUEUE_BACKOFF = concat!(
        "
    UPDATE fenceq_queue_flow
    SET    backoff_until = NULL, backoff_reason = NULL, backoff_since = NULL, updated_at = $2,
           lifted_at = $2, lifted_by = $3, lift_note = $4, lifted_reason = backoff_reason
    WHERE  queue = $1 AND backoff_until > $2
    RETURNING ",
        wake_listeners!("queue"),
        " AS woke"
    );

    /// Queue `$1`'s last lift of a back-off.
    BACKOFF_LIFT = "
    SELECT queue, lifted_at, lifted_by, lift_note, lifted_reason
    FROM   fenceq_queue_flow
    WHERE  queue = $1 AND lifted_at IS NOT NULL";
}
