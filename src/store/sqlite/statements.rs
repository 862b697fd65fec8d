//! The SQLite dialect of every transition: one named statement each, named after the store
//! method that runs it (`Store::complete_if_owned` runs `COMPLETE_IF_OWNED`), which is named
//! after the public operation it serves.
//!
//! Every transition of a claimed row is guarded in its own statement by the full token and a
//! live lease (`owned_by_token!`); a guard that fails changes nothing, and the layer above
//! the seam reads the row's identity to say why.

/// The fence: the exact token of a running job whose lease is live at `:now`.
macro_rules! owned_by_token {
    () => {
        "id = :id AND attempt = :attempt AND claim_id = :claim_id
           AND state = 'running' AND lease_until > :now"
    };
}

/// The settles that end a job as an unacknowledged exhaustion keeping its token (the
/// handler's, a retry out of attempts, a snooze past its cap): `$guard` is what else must
/// hold (`""` or a condition followed by `AND`).
macro_rules! exhausts_owned {
    ($guard:literal) => {
        concat!(
            "UPDATE fenceq_jobs
    SET    state = 'exhausted', lease_until = NULL, last_error = :error,
           settled_at = :now, exhausted_at = :now, acknowledged_at = NULL
    WHERE  ",
            $guard,
            owned_by_token!()
        )
    };
}

/// The exact token of a job in a given non-running state (`:state`).
macro_rules! identified_by_token {
    () => {
        "id = :id AND attempt = :attempt AND claim_id = :claim_id AND state = :state"
    };
}

/// An operator's or reconciler's change records itself on the row (`Job::decision`).
macro_rules! records_decision {
    () => {
        "decision = :decision, decided_at = :now, decided_by = :by, decision_note = :note"
    };
}

/// The id of a new job: NULL, so that SQLite gives it the largest id in the table plus one,
/// unless prune deleted a larger one (`fenceq_id_floor`, schema 18): then the floor plus one.
/// Either way no id is handed out twice, as AUTOINCREMENT promised, for two lookups (the
/// floor's one row, the end of the table's primary key) instead of AUTOINCREMENT's write of
/// its `sqlite_sequence` row in every transaction that inserts.
macro_rules! new_job_id {
    () => {
        "(SELECT floor + 1 FROM fenceq_id_floor
             WHERE only = 1 AND floor > (SELECT coalesce(max(id), 0) FROM fenceq_jobs))"
    };
}

/// The claim's selection (see `CLAIM_SELECT`): `$columns` of up to `:limit` claimable jobs of
/// `:queue` at `:now`, none while `$closed` holds, each followed by `lapsed`: 1 for a running
/// job whose lease ran out (the claim takes its attempt over, and records it:
/// `RECORD_EXPIRED_LEASE`), 0 for a pending one. A constant of each branch, so the pending
/// branch still reads nothing but its index.
macro_rules! claim_select {
    ($columns:literal, $closed:literal) => {
        concat!(
            "
    SELECT ",
            $columns,
            ", lapsed FROM (
        SELECT ",
            $columns,
            ", 0 AS lapsed
        FROM   fenceq_jobs
        WHERE  queue = :queue AND state = 'pending' AND group_held = 0 AND run_at <= :now
        ORDER  BY priority DESC, run_at, id
        LIMIT  :limit)
    UNION ALL
    SELECT ",
            $columns,
            ", lapsed FROM (
        SELECT ",
            $columns,
            ", 1 AS lapsed
        FROM   fenceq_jobs
        WHERE  queue = :queue AND state = 'running' AND lease_until <= :now
          AND  attempt < max_attempts
        ORDER  BY priority DESC, run_at, id
        LIMIT  :limit)
    ORDER BY priority DESC, run_at, id
    LIMIT CASE WHEN ",
            $closed,
            "
               THEN 0 ELSE :limit END"
        )
    };
}

stmt! {
    /// Idempotent intake: a second row with the same (queue, key) is not inserted (`changes()`
    /// is then 0). `ON CONFLICT` (unlike `INSERT OR IGNORE`) skips only the uniqueness conflict,
    /// so a CHECK violation still fails loudly. No `RETURNING`: SQLite would open an ephemeral
    /// table for every insert; `last_insert_rowid()` is free.
    ENQUEUE = concat!(
        "
    INSERT INTO fenceq_jobs (id, queue, key, payload, priority, run_at, max_attempts, created_at)
    VALUES (",
        new_job_id!(),
        ", ?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING"
    );
}

/// Batched intake: `ENQUEUE` for many rows in one statement (`ENQUEUE_ROWS` values, 7
/// parameters each, in `ENQUEUE`'s order), so that a batch pays one statement's start and
/// end instead of one per row. Used only where every row is new (see
/// `Store::enqueue_all_new`); the statement itself still skips a key conflict. Only the first
/// row takes its id from `new_job_id!` (every row's would be the same value); the rest follow
/// it, each the largest id plus one.
pub(crate) fn enqueue_rows(rows: usize) -> crate::store::Stmt {
    static STATEMENTS: [std::sync::OnceLock<String>; ENQUEUE_ROWS.len()] =
        [const { std::sync::OnceLock::new() }; ENQUEUE_ROWS.len()];
    let slot = ENQUEUE_ROWS.iter().position(|&n| n == rows).expect("a size of ENQUEUE_ROWS");
    let sql = STATEMENTS[slot].get_or_init(|| {
        let values: Vec<String> = (0..rows)
            .map(|r| {
                let id = if r == 0 { new_job_id!() } else { "NULL" };
                let p: Vec<String> = (1..=7).map(|c| format!("?{}", r * 7 + c)).collect();
                format!("({id}, {})", p.join(", "))
            })
            .collect();
        format!(
            "INSERT INTO fenceq_jobs (id, queue, key, payload, priority, run_at, max_attempts, created_at)
    VALUES {}
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING",
            values.join(", ")
        )
    });
    crate::store::Stmt { name: "ENQUEUE_ROWS", sql }
}

/// The row counts `enqueue_rows` has statements for, largest first (a batch is cut into
/// these; the rest goes row by row). Few sizes, so the statement cache holds them all.
pub(crate) const ENQUEUE_ROWS: [usize; 2] = [100, 10];

/// Why the batched statements (`claim_rows`, `complete_rows`) read `UPDATE fenceq_jobs NOT
/// INDEXED … FROM (VALUES …) AS t WHERE fenceq_jobs.id = +t.column1 …`: the list must drive,
/// each listed job one probe of the primary key. SQLite's planner (whose plans here ignore
/// bound values, so it cannot know the list is short) otherwise chose to walk the whole
/// table, or the lease index over every running job, and look each row up in an automatic
/// index of the list. `NOT INDEXED` leaves it no index of the table but the primary key; the
/// unary `+` on the list's side leaves it no automatic index of the list. `plan_tests.rs`
/// pins the plan, with and without `ANALYZE` statistics.
macro_rules! list_drives {
    () => {
        "UPDATE fenceq_jobs NOT INDEXED"
    };
}

/// The row counts `claim_rows` and `complete_rows` have statements for, smallest first. A
/// list of jobs is cut into pieces of the largest, and a piece is padded with rows of NULLs
/// (which match no job) up to the smallest size that holds it: few sizes, so the statement
/// cache holds them all, and none of them a list's exact length.
pub(crate) const BATCH_ROWS: [usize; 3] = [4, 16, 64];

/// The batched claim: the jobs whose ids `CLAIM_SELECT` (or the limited claim) chose, each
/// with the claim id bound beside it, claimed in one statement that returns what
/// `CLAIM_READ` reads for one (in its order), then the id and the claim id. `?1` worker, `?2` now, `?3` lease end (computed in Rust,
/// saturating, as for `CLAIM_UPDATE`), then `rows` pairs (id, claim id). It sets exactly what
/// `CLAIM_UPDATE` sets, in the same transaction as the selection, which therefore still
/// holds: the selection is where the claim's guards are (pause, back-off, limits, groups,
/// priority, `run_at`, the lease of an expired claim).
///
/// One `RETURNING` per batch instead of a read per job: the ephemeral table it costs is
/// paid once for the batch. See `list_drives!` for the plan.
pub(crate) fn claim_rows(rows: usize) -> crate::store::Stmt {
    static STATEMENTS: BatchStatements = BatchStatements::new();
    let sql = STATEMENTS.sql(rows, || {
        format!(
            concat!(
                list_drives!(),
                "
    SET    state = 'running', attempt = attempt + 1, claim_id = t.column2, worker = ?1,
           lease_until = ?3, heartbeat_at = ?2, wait_until = NULL
    FROM   (VALUES {}) AS t
    WHERE  fenceq_jobs.id = +t.column1
    RETURNING queue, key, payload, priority, attempt, max_attempts, lease_until, last_error, group_name, id, claim_id"
            ),
            values_list(rows, 2, 3)
        )
    });
    crate::store::Stmt { name: "CLAIM_ROWS", sql }
}

/// The batched `COMPLETE_IF_OWNED`: `?1` now, then `rows` triples (id, attempt, claim id),
/// each completed only where the whole token still owns its row and the lease is live at
/// `?1` (the fence of `owned_by_token!`, term for term). Returns the token of each row it
/// completed, and the row's queue and group, so that the groups it let go are handed on
/// without a read per job. A job listed twice is completed once: SQLite updates a row of
/// an `UPDATE … FROM` at most once. See `list_drives!` for the plan.
pub(crate) fn complete_rows(rows: usize) -> crate::store::Stmt {
    static STATEMENTS: BatchStatements = BatchStatements::new();
    let sql = STATEMENTS.sql(rows, || {
        format!(
            concat!(
                list_drives!(),
                "
    SET    state = 'completed', lease_until = NULL, settled_at = ?1
    FROM   (VALUES {}) AS t
    WHERE  fenceq_jobs.id = +t.column1 AND fenceq_jobs.attempt = +t.column2 AND fenceq_jobs.claim_id = +t.column3
      AND  fenceq_jobs.state = 'running' AND fenceq_jobs.lease_until > ?1
    RETURNING id, attempt, claim_id, queue, group_name"
            ),
            values_list(rows, 3, 1)
        )
    });
    crate::store::Stmt { name: "COMPLETE_ROWS", sql }
}

/// The batched `RECORD_START`: `?1` queue, `?2` the claim's instant, then `rows` rows of
/// (job id, claim id, attempt, group, starts), the starts of one group each; padding rows (all
/// NULL) insert nothing.
pub(crate) fn record_start_rows(rows: usize) -> crate::store::Stmt {
    static STATEMENTS: BatchStatements = BatchStatements::new();
    let sql = STATEMENTS.sql(rows, || {
        format!(
            "
    INSERT INTO fenceq_starts (queue, at, claim_id, job_id, attempt, group_name, starts)
    SELECT ?1, ?2, t.column2, t.column1, t.column3, t.column4, t.column5
    FROM   (VALUES {}) AS t
    WHERE  t.column1 IS NOT NULL",
            values_list(rows, 5, 2)
        )
    });
    crate::store::Stmt { name: "RECORD_START_ROWS", sql }
}

/// The text of a batched statement at each of `BATCH_ROWS`' sizes, written once per size.
pub(crate) struct BatchStatements([std::sync::OnceLock<String>; BATCH_ROWS.len()]);

impl BatchStatements {
    const fn new() -> BatchStatements {
        BatchStatements([const { std::sync::OnceLock::new() }; BATCH_ROWS.len()])
    }

    /// The statement for `rows` (a size of `BATCH_ROWS`), written by `write` the first time.
    fn sql(&'static self, rows: usize, write: impl FnOnce() -> String) -> &'static str {
        let slot = BATCH_ROWS.iter().position(|&n| n == rows).expect("a size of BATCH_ROWS");
        self.0[slot].get_or_init(write)
    }
}

/// `rows` rows of `columns` positional parameters each, numbered from `after + 1`.
fn values_list(rows: usize, columns: usize, after: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let p: Vec<String> = (1..=columns).map(|c| format!("?{}", after + r * columns + c)).collect();
            format!("({})", p.join(", "))
        })
        .collect();
    values.join(", ")
}

stmt! {
    /// The largest id handed out so far (0 before the first): the table's largest, or the
    /// largest prune deleted (see `new_job_id!`).
    JOB_ID_SEQUENCE = "
    SELECT max(coalesce((SELECT max(id) FROM fenceq_jobs), 0),
               coalesce((SELECT floor FROM fenceq_id_floor WHERE only = 1), 0))";

    FIND_BY_KEY = "
    SELECT id FROM fenceq_jobs WHERE queue = :queue AND key = :key";

    /// Up to `:limit` claimable jobs of a queue, by priority, then run_at, then id: due pending
    /// jobs (partial index `fenceq_jobs_claim`) and running jobs whose lease expired with attempts
    /// left (partial index `fenceq_jobs_lease`). Two indexed branches instead of one `OR`, so the
    /// claim never scans the table however many jobs wait. The expired branch sorts the expired
    /// leases (few, unlike pending rows) in claim order, so that priority also decides among them. The chosen rows' data is read by id
    /// afterwards (`CLAIM_READ`), keeping payloads out of the sort.
    ///
    /// A paused queue (`fenceq_queues`), or one backing off (`fenceq_queue_flow`, a back-off
    /// that ends after `:now`), claims nothing: each is looked up once per claim, by primary
    /// key, in the final `LIMIT`, which SQLite evaluates before it runs either
    /// branch, so a paused claim costs one probe and walks no index. (As a `NOT EXISTS` in the
    /// branches' `WHERE` it would be tested against every pending row of the queue, and a paused
    /// queue's claim would walk them all to find none.)
    CLAIM_SELECT = claim_select!(
        "id, priority, run_at",
        "EXISTS (SELECT 1 FROM fenceq_queues WHERE queue = :queue AND paused_at IS NOT NULL)
            OR EXISTS (SELECT 1 FROM fenceq_queue_flow WHERE queue = :queue AND backoff_until > :now)
            OR EXISTS (SELECT 1 FROM fenceq_limits WHERE queue = :queue)"
    );

    /// `CLAIM_SELECT`'s jobs with their groups, for a claim of a queue with limits (which
    /// `CLAIM_SELECT` leaves to `store::limits`): the pause and the back-off still close it.
    CLAIM_CANDIDATES = claim_select!(
        "id, priority, run_at, group_name",
        "EXISTS (SELECT 1 FROM fenceq_queues WHERE queue = :queue AND paused_at IS NOT NULL)
            OR EXISTS (SELECT 1 FROM fenceq_queue_flow WHERE queue = :queue AND backoff_until > :now)"
    );

    /// Claims one selected job with a fresh claim id. Runs in the same IMMEDIATE transaction as
    /// `CLAIM_SELECT`, so the selection cannot have changed in between. (No `RETURNING`:
    /// it costs an ephemeral table per row; `CLAIM_READ` reads the row instead.)
    ///
    /// The lease end `?5` is computed in Rust (saturating): SQL never adds two caller-controlled
    /// integers, whose overflow SQLite would turn into a REAL.
    CLAIM_UPDATE = "
    UPDATE fenceq_jobs
    SET    state = 'running', attempt = attempt + 1, claim_id = ?2, worker = ?3,
           lease_until = ?5, heartbeat_at = ?4, wait_until = NULL
    WHERE  id = ?1";

    /// The data a claim hands out, read right after `CLAIM_UPDATE` in the same transaction.
    CLAIM_READ = "
    SELECT queue, key, payload, priority, attempt, max_attempts, lease_until, last_error, group_name
    FROM   fenceq_jobs
    WHERE  id = ?1";

    /// `:lease_until` is computed in Rust, saturating (see `CLAIM_UPDATE`).
    RENEW_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    lease_until = :lease_until, heartbeat_at = :now
    WHERE  ",
        owned_by_token!()
    );

    /// What an owned write checks as it takes the write lock: the exact token's live lease, and
    /// the length the claim or last renewal granted (`lease_until - heartbeat_at`).
    OWNED_LEASE = concat!(
        "SELECT lease_until, heartbeat_at FROM fenceq_jobs
    WHERE  ",
        owned_by_token!()
    );

    /// An owned write's commit extends the lease from the commit by the claim's lease length, so
    /// that the owner can still settle after a write that outlasted the nominal lease (nobody
    /// could claim meanwhile: the write held the lock). Guarded by the exact token and
    /// `running`, not by the lease: the lease was checked when the lock was taken.
    EXTEND_OWNED = "
    UPDATE fenceq_jobs
    SET    lease_until = :lease_until, heartbeat_at = :now
    WHERE  id = :id AND attempt = :attempt AND claim_id = :claim_id AND state = 'running'
      AND  lease_until < :lease_until";

    OWNS = concat!(
        "SELECT count(*) FROM fenceq_jobs
    WHERE  ",
        owned_by_token!()
    );

    COMPLETE_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'completed', lease_until = NULL, settled_at = :now
    WHERE  ",
        owned_by_token!()
    );

    /// Back to pending while attempts are left (the caller checked and the CHECK constraint
    /// `pending_has_attempts_left` enforces it).
    RETRY_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', lease_until = NULL, run_at = :run_at, last_error = :error
    WHERE  attempt < max_attempts AND ",
        owned_by_token!()
    );

    /// A durable, unacknowledged terminal record that keeps the token.
    EXHAUST_IF_OWNED = exhausts_owned!("");

    /// A retry out of attempts: `EXHAUST_IF_OWNED` only when no attempt is left (the same
    /// guard as PostgreSQL's, where a retry can miss a row another transaction holds).
    EXHAUST_OUT_OF_ATTEMPTS_IF_OWNED = exhausts_owned!("attempt >= max_attempts AND ");

    MARK_UNKNOWN_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'unknown', lease_until = NULL, last_error = :error, settled_at = :now
    WHERE  ",
        owned_by_token!()
    );

    PARK_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'waiting', lease_until = NULL, wait_until = :wait_until, last_error = :error
    WHERE  ",
        owned_by_token!()
    );

    /// A claim handed back unstarted: pending and due at once, and its attempt given back by
    /// raising the budget, not by lowering the counter (the next claim must be a new attempt, so
    /// that no (id, attempt) is handed out twice). `run_at` never moves later: a job due before
    /// keeps its place in the claim order.
    RELEASE_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', lease_until = NULL, run_at = min(run_at, :now),
           max_attempts = max_attempts + 1
    WHERE  ",
        owned_by_token!()
    );

    /// A resumed job gets one more attempt: the claim that parked it should not count against
    /// the budget of the work that continues.
    ///
    /// Refused once the deadline has passed, whether or not the reaper has exhausted the job
    /// yet: the outcome depends on the clock, never on the reaper's timing.
    RESUME_IF_WAITING = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', wait_until = NULL, run_at = :now, max_attempts = max_attempts + 1
    WHERE  wait_until > :now AND ",
        identified_by_token!()
    );

    /// Idempotent: a repeat changes nothing, not even the recorded decision.
    ACKNOWLEDGE_IF_EXHAUSTED = concat!(
        "UPDATE fenceq_jobs
    SET    acknowledged_at = coalesce(acknowledged_at, :now),
           decision      = CASE WHEN acknowledged_at IS NULL THEN :decision ELSE decision END,
           decided_at    = CASE WHEN acknowledged_at IS NULL THEN :now ELSE decided_at END,
           decided_by    = CASE WHEN acknowledged_at IS NULL THEN :by ELSE decided_by END,
           decision_note = CASE WHEN acknowledged_at IS NULL THEN :note ELSE decision_note END
    WHERE  ",
        identified_by_token!()
    );

    RESOLVE_COMPLETE_IF_UNKNOWN = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'completed', settled_at = :now, ",
        records_decision!(),
        "
    WHERE  ",
        identified_by_token!()
    );

    /// An operator's retry grants one attempt when none are left.
    RESOLVE_RETRY_IF_UNKNOWN = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', run_at = :now, settled_at = NULL, group_held = (group_name IS NOT NULL),
           max_attempts = max(max_attempts, attempt + 1), ",
        records_decision!(),
        "
    WHERE  ",
        identified_by_token!()
    );

    RESOLVE_EXHAUST_IF_UNKNOWN = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'exhausted', settled_at = :now, exhausted_at = :now, acknowledged_at = NULL, ",
        records_decision!(),
        "
    WHERE  ",
        identified_by_token!()
    );

    /// An operator's acknowledgement of one exhaustion by id (applications acknowledge with the
    /// exact token, `ACKNOWLEDGE_IF_EXHAUSTED`).
    ACKNOWLEDGE_JOB_IF_UNACKNOWLEDGED = concat!(
        "UPDATE fenceq_jobs
    SET    acknowledged_at = :now, ",
        records_decision!(),
        "
    WHERE  id = :id AND state = 'exhausted' AND acknowledged_at IS NULL"
    );

    /// An operator's acknowledgement of every unacknowledged exhaustion of one queue, in the
    /// transaction that counts them.
    ACKNOWLEDGE_ALL = concat!(
        "UPDATE fenceq_jobs
    SET    acknowledged_at = :now, ",
        records_decision!(),
        "
    WHERE  queue = :queue AND state = 'exhausted' AND acknowledged_at IS NULL
    RETURNING id"
    );

    CANCEL_IF_ACTIVE = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'cancelled', lease_until = NULL, wait_until = NULL, settled_at = :now, group_held = 0, ",
        records_decision!(),
        "
    WHERE  id = :id AND state IN ('pending', 'waiting', 'running')"
    );

    /// Dead-letter redrive: a fresh attempt budget (and snooze count), due now. The attempt
    /// counter restarts, and the claim id is what keeps the old tokens dead.
    REPLAY_IF_EXHAUSTED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', attempt = 0, snoozes = 0, run_at = :now, settled_at = NULL,
           exhausted_at = NULL, acknowledged_at = NULL, group_held = (group_name IS NOT NULL), ",
        records_decision!(),
        "
    WHERE  id = :id AND state = 'exhausted'"
    );

    /// Expired leases: back to pending with attempts left, else exhausted. Guarded by state and
    /// lease in the same statement, so a completion that committed first is never overwritten.
    /// `INDEXED BY`: with plans that ignore bound values (see `connection_init`) the planner
    /// would walk the whole table in id order to honour the `LIMIT`, instead of the few rows
    /// of the partial index.
    REAP_EXPIRED = "
    UPDATE fenceq_jobs
    SET    state        = CASE WHEN attempt < max_attempts THEN 'pending' ELSE 'exhausted' END,
           run_at       = CASE WHEN attempt < max_attempts THEN :now ELSE run_at END,
           exhausted_at = CASE WHEN attempt < max_attempts THEN NULL ELSE :now END,
           settled_at   = CASE WHEN attempt < max_attempts THEN NULL ELSE :now END,
           last_error   = 'lease expired (worker ' || worker || ')',
           lease_until  = NULL
    WHERE  id IN (SELECT id FROM fenceq_jobs INDEXED BY fenceq_jobs_lease
                  WHERE  state = 'running' AND lease_until <= :now
                  ORDER  BY id LIMIT :limit)
      AND  state = 'running' AND lease_until <= :now
    RETURNING state, queue, group_name, id, claim_id";

    /// Parked jobs whose deadline passed are exhausted (never reclaimed). `INDEXED BY` as in
    /// `REAP_EXPIRED`.
    REAP_WAITING = "
    UPDATE fenceq_jobs
    SET    state = 'exhausted', wait_until = NULL, settled_at = :now, exhausted_at = :now,
           acknowledged_at = NULL,
           last_error = 'wait expired: ' || coalesce(last_error, 'no reason given')
    WHERE  id IN (SELECT id FROM fenceq_jobs INDEXED BY fenceq_jobs_wait
                  WHERE  state = 'waiting' AND wait_until <= :now
                  ORDER  BY id LIMIT :limit)
      AND  state = 'waiting' AND wait_until <= :now
    RETURNING queue, group_name, id, claim_id";

    /// Returns each deleted row's id (for `RAISE_ID_FLOOR` and `FORGET_ATTEMPTS`), queue and
    /// state (for `UNCOUNT_SETTLED`).
    PRUNE_SETTLED = "
    DELETE FROM fenceq_jobs
    WHERE  id IN (SELECT id FROM fenceq_jobs
                  WHERE  state IN ('completed', 'cancelled') AND settled_at <= :horizon
                  LIMIT  :limit)
    RETURNING id, queue, state";

    PRUNE_ACKNOWLEDGED = "
    DELETE FROM fenceq_jobs
    WHERE  id IN (SELECT id FROM fenceq_jobs
                  WHERE  state = 'exhausted' AND acknowledged_at IS NOT NULL
                    AND  acknowledged_at <= :horizon
                  LIMIT  :limit)
    RETURNING id, queue";

    /// After a prune: no new job may get an id at or below the largest one it deleted (see
    /// `new_job_id!`). An upsert, so that a floor row deleted by hand is written again.
    RAISE_ID_FLOOR = "
    INSERT INTO fenceq_id_floor (only, floor) VALUES (1, :id)
    ON CONFLICT (only) DO UPDATE SET floor = excluded.floor WHERE floor < excluded.floor";

    EXHAUSTIONS = "
    SELECT id, attempt, claim_id, queue, key, payload, last_error, exhausted_at
    FROM   fenceq_jobs
    WHERE  state = 'exhausted' AND acknowledged_at IS NULL AND id > :after
    ORDER  BY id
    LIMIT  :limit";

    UNKNOWNS = "
    SELECT id, attempt, claim_id, queue, key, payload, last_error, settled_at
    FROM   fenceq_jobs
    WHERE  state = 'unknown' AND id > :after
    ORDER  BY id
    LIMIT  :limit";

    JOB = concat!(
        "
    SELECT ",
        job_columns!(),
        "
    FROM   fenceq_jobs
    WHERE  id = :id"
    );

    /// Jobs in id order after `:after`, optionally of one queue and one state.
    LIST = concat!(
        "
    SELECT ",
        job_columns!(),
        "
    FROM   fenceq_jobs
    WHERE  id > :after
      AND  (:queue IS NULL OR queue = :queue)
      AND  (:state IS NULL OR state = :state)
    ORDER  BY id
    LIMIT  :limit"
    );

    /// What a reap pass would change now (for dry runs).
    REAP_PREVIEW = "
    SELECT coalesce(sum(state = 'running' AND attempt < max_attempts), 0),
           coalesce(sum(state = 'running' AND attempt >= max_attempts), 0),
           (SELECT count(*) FROM fenceq_jobs WHERE state = 'waiting' AND wait_until <= :now)
    FROM   fenceq_jobs
    WHERE  state = 'running' AND lease_until <= :now";

    /// Due pending jobs and running jobs of one queue (a pool's `wait_idle`), each branch on its
    /// partial index. A paused queue's pending jobs are not due: no claim takes them until it is
    /// unpaused (the `CASE` skips counting them); nor are those of a queue backing off, until
    /// its back-off ends.
    DUE_OR_RUNNING = "
    SELECT CASE WHEN EXISTS (SELECT 1 FROM fenceq_queues WHERE queue = :queue AND paused_at IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM fenceq_queue_flow WHERE queue = :queue AND backoff_until > :now)
                THEN 0
                ELSE (SELECT count(*) FROM fenceq_jobs WHERE queue = :queue AND state = 'pending' AND group_held = 0 AND run_at <= :now)
           END
         + (SELECT count(*) FROM fenceq_jobs WHERE queue = :queue AND state = 'running')";

    /// A periodic job's tick is recorded only when it is later than the schedule's recorded one
    /// (`changes()` is 1 when it was): the upsert's `WHERE` leaves an equal or later tick alone,
    /// so a tick is enqueued once whoever races for it and whatever the clock did.
    /// A row its registration made has no tick yet, and takes any. The next tick is recorded
    /// with the tick, for the processes that cannot compute it.
    ADVANCE_SCHEDULE_IF_LATER = "
    INSERT INTO fenceq_schedules (name, last_tick, enqueued_at, next_tick, recorded_at)
    VALUES (:name, :tick, :now, :next, :now)
    ON CONFLICT (name) DO UPDATE
    SET    last_tick = excluded.last_tick, enqueued_at = excluded.enqueued_at,
           next_tick = excluded.next_tick, recorded_at = excluded.recorded_at
    WHERE  fenceq_schedules.last_tick IS NULL OR excluded.last_tick > fenceq_schedules.last_tick";

    SCHEDULE_LAST_TICK = "
    SELECT last_tick FROM fenceq_schedules WHERE name = :name AND last_tick IS NOT NULL";

    /// A registration records what the schedule is (the latest one under the name wins) and
    /// leaves its latest tick alone.
    RECORD_SCHEDULE = "
    INSERT INTO fenceq_schedules (name, definition, queue, next_tick, recorded_at)
    VALUES (:name, :definition, :queue, :next, :now)
    ON CONFLICT (name) DO UPDATE
    SET    definition = excluded.definition, queue = excluded.queue,
           next_tick = excluded.next_tick, recorded_at = excluded.recorded_at";

    SCHEDULES = "
    SELECT name, definition, queue, last_tick, next_tick, recorded_at
    FROM   fenceq_schedules
    ORDER  BY name";

    /// What a prune pass would delete now (for dry runs).
    PRUNE_PREVIEW = "
    SELECT (SELECT count(*) FROM fenceq_jobs
            WHERE state IN ('completed', 'cancelled') AND settled_at <= :horizon),
           (SELECT count(*) FROM fenceq_jobs
            WHERE state = 'exhausted' AND acknowledged_at IS NOT NULL AND acknowledged_at <= :horizon)";

    /// Why a guarded write changed nothing: the row's current identity and state.
    IDENTITY = "
    SELECT state, attempt, claim_id, lease_until, wait_until FROM fenceq_jobs WHERE id = :id";

    /// Counts per queue and state (and for `exhausted`, acknowledged or not), in queue order,
    /// without reading a settled row: retention keeps those for days, so they outnumber the
    /// live ones by far. Each live state is counted from its own partial index (each branch
    /// repeats its index's `WHERE` terms, which SQLite's planner matches literally), and the
    /// settled states are read from `fenceq_settled_counts`, which the transitions keep in step.
    ///
    /// Pending rows are in two indexes: the claim's (`group_held = 0`) and the group index
    /// (held rows, which the CHECK `held_only_pending_in_group` keeps pending); one row per
    /// queue sums both, with the earliest `run_at` of either. `expired` is 0 outside
    /// `running`, and a settled count has no `min_run_at` (nothing reads it). No row for a
    /// count of 0, as when every row was counted.
    STATS = "
    SELECT queue, 'pending', 0, sum(n), min(first_run_at), 0
    FROM   (SELECT queue, count(*) AS n, min(run_at) AS first_run_at
            FROM   fenceq_jobs
            WHERE  state = 'pending' AND group_held = 0
            GROUP  BY queue
            UNION ALL
            SELECT queue, count(*), min(run_at)
            FROM   fenceq_jobs
            WHERE  group_name IS NOT NULL
              AND  (state = 'pending' OR state = 'running' OR state = 'waiting' OR state = 'unknown'
                    OR state = 'exhausted')
              AND  group_held = 1 AND state = 'pending'
            GROUP  BY queue)
    GROUP  BY queue
    UNION ALL
    SELECT queue, 'running', 0, count(*), min(run_at), sum(lease_until <= :now)
    FROM   fenceq_jobs
    WHERE  state = 'running'
    GROUP  BY queue
    UNION ALL
    SELECT queue, 'waiting', 0, count(*), min(run_at), 0
    FROM   fenceq_jobs
    WHERE  state = 'waiting'
    GROUP  BY queue
    UNION ALL
    SELECT queue, 'unknown', 0, count(*), min(run_at), 0
    FROM   fenceq_jobs
    WHERE  state = 'unknown'
    GROUP  BY queue
    UNION ALL
    SELECT queue, 'exhausted', 0, count(*), min(run_at), 0
    FROM   fenceq_jobs
    WHERE  state = 'exhausted' AND acknowledged_at IS NULL
    GROUP  BY queue
    UNION ALL
    SELECT queue, CASE WHEN state = 'acknowledged' THEN 'exhausted' ELSE state END, state = 'acknowledged',
           count, NULL, 0
    FROM   fenceq_settled_counts
    WHERE  count > 0
    ORDER  BY queue";

    /// Completions per minute in `:from..:until`. The `state IN (...)` term repeats the settled
    /// index's own `WHERE` so that SQLite's planner (which matches a partial index's terms
    /// literally) may use that index; `state = 'completed'` then leaves the cancelled out.
    COMPLETIONS_PER_MINUTE = "
    SELECT settled_at / 60000 AS minute, count(*)
    FROM   fenceq_jobs
    WHERE  state IN ('completed', 'cancelled') AND state = 'completed'
           AND settled_at >= :from AND settled_at < :until
    GROUP  BY minute
    ORDER  BY minute";

    /// The backup's read transaction on its source (`backup.rs`): every step copies from the one
    /// snapshot this fixes, so the copy is consistent while writers keep committing (a WAL
    /// reader never blocks them).
    BACKUP_SNAPSHOT_BEGIN = "BEGIN DEFERRED";

    /// A deferred transaction reads nothing until its first statement: this one starts the
    /// read transaction, and with it the snapshot.
    BACKUP_SNAPSHOT_READ = "SELECT count(*) FROM sqlite_schema";

    /// Ends the backup's read transaction (it wrote nothing, so there is nothing to undo).
    BACKUP_SNAPSHOT_END = "ROLLBACK";

    /// Pauses a queue (a queue exists by name: its first pause makes its row). A repeat while it
    /// is paused changes nothing, not even the record of who paused it (`changes()` is then 0:
    /// the upsert's `WHERE` skips the update).
    PAUSE_QUEUE = "
    INSERT INTO fenceq_queues (queue, paused_at, decision, decided_at, decided_by, decision_note)
    VALUES (:queue, :now, :decision, :now, :by, :note)
    ON CONFLICT (queue) DO UPDATE
    SET    paused_at = excluded.paused_at, decision = excluded.decision, decided_at = excluded.decided_at,
           decided_by = excluded.decided_by, decision_note = excluded.decision_note
    WHERE  paused_at IS NULL";

    /// Unpauses a paused queue, recording who did and why in place of the pause. A queue that
    /// is not paused is left alone.
    UNPAUSE_QUEUE = concat!(
        "UPDATE fenceq_queues
    SET    paused_at = NULL, ",
        records_decision!(),
        "
    WHERE  queue = :queue AND paused_at IS NOT NULL"
    );

    /// One queue's pause, while it is paused.
    QUEUE_PAUSE = "
    SELECT queue, paused_at, decided_by, decision_note
    FROM   fenceq_queues
    WHERE  queue = :queue AND paused_at IS NOT NULL";

    /// Every paused queue, by name.
    PAUSED_QUEUES = "
    SELECT queue, paused_at, decided_by, decision_note
    FROM   fenceq_queues
    WHERE  paused_at IS NOT NULL
    ORDER  BY queue";
}

/// A live job of a group (`h`) that holds it: pending, running or waiting, and under the
/// queue's `stop` policy (the default) also `unknown` or exhausted and unacknowledged. The
/// state chain first, as the partial index `fenceq_jobs_group` writes it, so that SQLite
/// uses the index for the probe.
macro_rules! holds_group {
    () => {
        "h.group_held = 0
           AND (h.state = 'pending' OR h.state = 'running' OR h.state = 'waiting' OR h.state = 'unknown'
                OR h.state = 'exhausted')
           AND (h.state = 'pending' OR h.state = 'running' OR h.state = 'waiting'
                OR ((h.state = 'unknown' OR h.acknowledged_at IS NULL)
                    AND coalesce((SELECT group_policy FROM fenceq_queue_flow WHERE queue = h.queue), 'stop') = 'stop'))"
    };
}

stmt! {
    /// Intake of a grouped job: as `ENQUEUE`, held back (`group_held`) when a job of its group
    /// already holds the group. The writer's lock keeps the group's holder from changing
    /// between the probe and the insert.
    ENQUEUE_IN_GROUP = concat!(
        "INSERT INTO fenceq_jobs (id, queue, key, payload, priority, run_at, max_attempts, created_at,
                         group_name, group_held)
    VALUES (",
        new_job_id!(),
        ", ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
            EXISTS (SELECT 1 FROM fenceq_jobs AS h
                    WHERE h.queue = ?1 AND h.group_name = ?8 AND ",
        holds_group!(),
        "))
    ON CONFLICT (queue, key) WHERE key IS NOT NULL DO NOTHING"
    );

    /// The queue and group of a grouped job (no row for a job without a group).
    GROUP_OF = "
    SELECT queue, group_name FROM fenceq_jobs WHERE id = :id AND group_name IS NOT NULL";

    /// Hands a group whose holder let go (settled, or failed under the `continue` policy) to
    /// its next job: the held job with the smallest id, unless a job still holds the group.
    /// Run after every transition that can end a hold or put a job of a group back to pending.
    RELEASE_GROUP = concat!(
        "UPDATE fenceq_jobs SET group_held = 0
    WHERE id = (SELECT n.id FROM fenceq_jobs AS n
                WHERE n.queue = :queue AND n.group_name = :group AND n.group_held = 1
                  AND (n.state = 'pending' OR n.state = 'running' OR n.state = 'waiting' OR n.state = 'unknown'
                       OR n.state = 'exhausted')
                ORDER BY n.id LIMIT 1)
      AND NOT EXISTS (SELECT 1 FROM fenceq_jobs AS h
                      WHERE h.queue = :queue AND h.group_name = :group AND ",
        holds_group!(),
        ")"
    );

    /// The groups of a queue that have held jobs (for a change of the queue's group policy).
    HELD_GROUPS = "
    SELECT DISTINCT group_name FROM fenceq_jobs
    WHERE  queue = :queue AND group_name IS NOT NULL AND group_held = 1
      AND  (state = 'pending' OR state = 'running' OR state = 'waiting' OR state = 'unknown'
            OR state = 'exhausted')";

    GROUP_POLICY = "
    SELECT group_policy FROM fenceq_queue_flow WHERE queue = :queue";

    SET_GROUP_POLICY = "
    INSERT INTO fenceq_queue_flow (queue, group_policy, updated_at) VALUES (:queue, :policy, :now)
    ON CONFLICT (queue) DO UPDATE SET group_policy = excluded.group_policy, updated_at = excluded.updated_at";

    /// One page of groups with live jobs, in (queue, group) order after the cursor: how many
    /// jobs each holds back, and its head (the job that holds it, or its oldest failed job).
    GROUPS_PAGE = "
    SELECT g.queue, g.group_name, g.held, h.id, h.state, h.run_at, h.wait_until, h.acknowledged_at
    FROM (SELECT queue, group_name, sum(group_held) AS held,
                 coalesce(min(CASE WHEN group_held = 0 AND (state = 'pending' OR state = 'running' OR state = 'waiting')
                                   THEN id END),
                          min(CASE WHEN group_held = 0 THEN id END)) AS head
          FROM   fenceq_jobs
          WHERE  group_name IS NOT NULL
            AND  (state = 'pending' OR state = 'running' OR state = 'waiting' OR state = 'unknown'
                  OR state = 'exhausted')
            AND  (:queue IS NULL OR queue = :queue)
            AND  (queue > :after_queue OR (queue = :after_queue AND group_name > :after_group))
          GROUP  BY queue, group_name
          ORDER  BY queue, group_name
          LIMIT  :limit) AS g
    LEFT JOIN fenceq_jobs AS h ON h.id = g.head
    ORDER BY g.queue, g.group_name";
}

stmt! {
    LIMITS = "
    SELECT scope, window_ms, max_count FROM fenceq_limits WHERE queue = :queue ORDER BY scope, window_ms";

    ALL_LIMITS = "
    SELECT queue, scope, window_ms, max_count FROM fenceq_limits ORDER BY queue, scope, window_ms";

    DELETE_LIMITS = "
    DELETE FROM fenceq_limits WHERE queue = :queue";

    INSERT_LIMIT = "
    INSERT INTO fenceq_limits (queue, scope, window_ms, max_count, updated_at)
    VALUES (:queue, :scope, :window_ms, :max_count, :now)";

    /// The queue's flow-control row, created if missing (its policy keeps its default).
    TOUCH_QUEUE_FLOW = "
    INSERT INTO fenceq_queue_flow (queue, updated_at) VALUES (:queue, :now)
    ON CONFLICT (queue) DO UPDATE SET updated_at = excluded.updated_at";

    /// Running attempts of a queue (partial index `fenceq_jobs_lease`).
    RUNNING_COUNT = "
    SELECT count(*) FROM fenceq_jobs WHERE queue = :queue AND state = 'running'";

    /// The queue's starts after `:since`, counted up to `:most`: at most `:most` rows are read,
    /// and as every row holds one start or more, their sum reaches `:most` whenever the
    /// window holds that many.
    QUEUE_STARTS = "
    SELECT min(coalesce(sum(starts), 0), :most)
    FROM   (SELECT starts FROM fenceq_starts WHERE queue = :queue AND at > :since LIMIT :most)";

    /// The queue's starts after `:since`, latest first, for the claim to sum until they reach
    /// a rate's count (the instant of that start is when the window next opens).
    QUEUE_STARTS_LATEST_FIRST = "
    SELECT at, starts FROM fenceq_starts WHERE queue = :queue AND at > :since ORDER BY at DESC";

    /// A group's starts after `:since`, counted up to `:most` (as `QUEUE_STARTS`).
    GROUP_STARTS = "
    SELECT min(coalesce(sum(starts), 0), :most)
    FROM   (SELECT starts FROM fenceq_starts
            WHERE  queue = :queue AND group_name = :group AND group_name IS NOT NULL AND at > :since
            LIMIT  :most)";

    /// A group's starts after `:since`, latest first (as `QUEUE_STARTS_LATEST_FIRST`).
    GROUP_STARTS_LATEST_FIRST = "
    SELECT at, starts FROM fenceq_starts
    WHERE  queue = :queue AND group_name = :group AND group_name IS NOT NULL AND at > :since
    ORDER  BY at DESC";

    /// The `:starts` starts of one group (or of none) in one claim, keyed by the claim id of
    /// its first job: (job, attempt) is not unique, as a replayed job starts its attempts from
    /// the first again.
    RECORD_START = "
    INSERT INTO fenceq_starts (queue, at, claim_id, job_id, attempt, group_name, starts)
    VALUES (:queue, :at, :claim_id, :id, :attempt, :group, :starts)";

    /// Forgets the queue's starts at `:before` or earlier, returning how many each forgotten
    /// row held.
    FORGET_STARTS = "
    DELETE FROM fenceq_starts WHERE queue = :queue AND at <= :before RETURNING starts";

    /// Keeps the queue's count of its starts in step with what a claim recorded and forgot.
    COUNT_STARTS_KEPT = "
    UPDATE fenceq_queue_flow SET starts_kept = starts_kept + :recorded - :forgotten WHERE queue = :queue";

    /// How many starts the queue has recorded and not yet forgotten, and the latest of them
    /// (the end of the primary key's range of the queue).
    KEPT_STARTS = "
    SELECT coalesce((SELECT starts_kept FROM fenceq_queue_flow WHERE queue = :queue), 0),
           (SELECT max(at) FROM fenceq_starts WHERE queue = :queue)";

    /// Groups of the queue with `:count` or more starts after `:since`, through the starts'
    /// group index.
    SPENT_GROUPS = "
    SELECT group_name FROM fenceq_starts
    WHERE  queue = :queue AND group_name IS NOT NULL AND at > :since
    GROUP  BY group_name HAVING sum(starts) >= :count";

    /// The `run_at` of the group's head when it is pending and not due at `:now` (through the
    /// group index).
    DEFERRED_HEAD = "
    SELECT run_at FROM fenceq_jobs
    WHERE  queue = :queue AND group_name = :group AND NOT group_held AND state = 'pending' AND run_at > :now";

    DEFER_PENDING = "
    UPDATE fenceq_jobs SET run_at = max(run_at, :at) WHERE id = :id AND state = 'pending'";

    /// `DEFER_PENDING` for the group's next held job (the one `RELEASE_GROUP` would release),
    /// found through the group index.
    DEFER_GROUP_NEXT = "
    UPDATE fenceq_jobs SET run_at = max(run_at, :at)
    WHERE id = (SELECT n.id FROM fenceq_jobs AS n
                WHERE n.queue = :queue AND n.group_name = :group AND n.group_held = 1
                  AND (n.state = 'pending' OR n.state = 'running' OR n.state = 'waiting' OR n.state = 'unknown'
                       OR n.state = 'exhausted')
                ORDER BY n.id LIMIT 1)
      AND state = 'pending'";
}

stmt! {
    /// A snooze: back to pending at `:run_at` without spending an attempt, while the job was
    /// snoozed fewer than `:max_snoozes` times. The attempt is given back as `RELEASE_IF_OWNED`
    /// gives it back, by raising the budget, never by lowering the counter (the next claim is a
    /// new attempt, so no (id, attempt) is handed out twice and the snoozed token stays dead).
    /// `:run_at` is computed in Rust, saturating.
    SNOOZE_IF_OWNED = concat!(
        "UPDATE fenceq_jobs
    SET    state = 'pending', lease_until = NULL, run_at = :run_at, last_error = :error,
           max_attempts = max_attempts + 1, snoozes = snoozes + 1
    WHERE  snoozes < :max_snoozes AND ",
        owned_by_token!()
    );

    /// A snooze past its cap: a durable, unacknowledged exhaustion that keeps the token, only
    /// when the job was snoozed `:max_snoozes` times or more.
    EXHAUST_PAST_SNOOZE_CAP_IF_OWNED = exhausts_owned!("snoozes >= :max_snoozes AND ");

    /// The back-off of job `:id`'s queue until `:until`: a queue without a flow row gets one; a
    /// stored back-off that ends as late or later is kept (`changes()` is then 0), so the
    /// back-off is the latest any handler asked for. (The `WHERE` of the `SELECT` also keeps
    /// SQLite's parser from reading `ON CONFLICT` as a join constraint.)
    BACK_OFF_QUEUE_OF = "
    INSERT INTO fenceq_queue_flow (queue, backoff_until, backoff_reason, backoff_since, updated_at)
    SELECT queue, :until, :reason, :now, :now FROM fenceq_jobs WHERE id = :id
    ON CONFLICT (queue) DO UPDATE
    SET    backoff_until = excluded.backoff_until, backoff_reason = excluded.backoff_reason,
           backoff_since = excluded.backoff_since, updated_at = excluded.updated_at
    WHERE  fenceq_queue_flow.backoff_until IS NULL
       OR  fenceq_queue_flow.backoff_until < excluded.backoff_until";

    /// One queue's back-off, while it lasts at `:now`, and when it was set (`backoff_since`:
    /// `updated_at` moves with the row's other writes).
    QUEUE_BACKOFF = "
    SELECT queue, backoff_until, backoff_reason, backoff_since
    FROM   fenceq_queue_flow
    WHERE  queue = :queue AND backoff_until > :now";

    /// Every back-off that lasts at `:now`, by queue.
    QUEUE_BACKOFFS = "
    SELECT queue, backoff_until, backoff_reason, backoff_since
    FROM   fenceq_queue_flow
    WHERE  backoff_until > :now
    ORDER  BY queue";

    /// Lifts a queue's back-off that lasts at `:now` (`changes()` is 1 when there was one). The
    /// row stays: it also holds the queue's group policy.
    /// Ends a lasting back-off and records the lift in place of the last one (the lifted
    /// reason is the row's before the update).
    CLEAR_QUEUE_BACKOFF = "
    UPDATE fenceq_queue_flow
    SET    backoff_until = NULL, backoff_reason = NULL, backoff_since = NULL, updated_at = :now,
           lifted_at = :now, lifted_by = :by, lift_note = :note, lifted_reason = backoff_reason
    WHERE  queue = :queue AND backoff_until > :now";

    /// The queue's last lift of a back-off.
    BACKOFF_LIFT = "
    SELECT queue, lifted_at, lifted_by, lift_note, lifted_reason
    FROM   fenceq_queue_flow
    WHERE  queue = :queue AND lifted_at IS NOT NULL";
}

// The counts of settled rows (`fenceq_settled_counts`, read by `STATS`): every transition
// into or out of `completed`, `cancelled` or exhausted-and-acknowledged (`'acknowledged'`)
// moves its queue's count by the rows it moved, in its own transaction. Explicit statements
// beside the transition, not triggers, so that the hot path pays only for what it writes (a
// batch adds once per queue, not once per row).
stmt! {
    /// Adds `:n` rows of `:queue` to the count of `:state`, making the count at its first row.
    COUNT_SETTLED = "
    INSERT INTO fenceq_settled_counts (queue, state, count) VALUES (:queue, :state, :n)
    ON CONFLICT (queue, state) DO UPDATE SET count = count + excluded.count";

    /// Adds job `:id`, which a transition just settled in `:state`, to its queue's count: the
    /// queue is read from the row the transition wrote (one probe of the primary key).
    COUNT_SETTLED_JOB = "
    INSERT INTO fenceq_settled_counts (queue, state, count)
    SELECT queue, :state, 1 FROM fenceq_jobs WHERE id = :id
    ON CONFLICT (queue, state) DO UPDATE SET count = count + excluded.count";

    /// Takes `:n` rows of `:queue` off the count of `:state`. A separate `UPDATE`, not an
    /// upsert of `-:n`: SQLite checks an upsert's inserted row (`count >= 0`) before it looks
    /// for the conflict. `changes()` is 0 when the count is missing or smaller than `:n`
    /// (rows the counts never had), which the caller reports as an error.
    UNCOUNT_SETTLED = "
    UPDATE fenceq_settled_counts SET count = count - :n WHERE queue = :queue AND state = :state AND count >= :n";

    /// The first step of a recount (`Store::recount_settled`): the counts forgotten, in the
    /// writer's transaction, so no settle comes between this and `RECOUNT_SETTLED`.
    FORGET_SETTLED_COUNTS = "DELETE FROM fenceq_settled_counts";

    /// The counts of the settled rows, counted from the rows (as the upgrade counts them);
    /// returns each count written.
    RECOUNT_SETTLED = "
    INSERT INTO fenceq_settled_counts (queue, state, count)
    SELECT queue, CASE WHEN state = 'exhausted' THEN 'acknowledged' ELSE state END, count(*)
    FROM   fenceq_jobs
    WHERE  state IN ('completed', 'cancelled') OR (state = 'exhausted' AND acknowledged_at IS NOT NULL)
    GROUP  BY 1, 2
    RETURNING count";

    /// Job `:id`'s queue and whether it is acknowledged, while it is exhausted: read before an
    /// acknowledgement by token (which repeats without change) and before a replay, which
    /// leaves no trace of whether the row was acknowledged.
    EXHAUSTED_JOB = "
    SELECT queue, acknowledged_at IS NOT NULL FROM fenceq_jobs WHERE id = :id AND state = 'exhausted'";
}

// The history of attempts (`fenceq_attempts`, schema 19): one record for every attempt that did
// not complete, written in the transaction of the transition that ended it, by the statement
// right after it (or, for a claim that takes over an expired lease, right before it). A
// completion writes none: a successful attempt costs what it cost before the history.
stmt! {
    /// The record of the attempt that a transition of job `:id` just ended with `:outcome` at
    /// `:now` (a settle of the exact live claim, the reaper's take-over of an expired lease or a
    /// passed deadline): its attempt, claim id and worker as the row holds them (no such
    /// transition changes them), its start `:started` (the claim's instant, which the claim id
    /// carries: `ClaimId::instant`), and its error as the transition stored it in `last_error`
    /// (each of them stores the attempt's error, reason or evidence there, cut to
    /// `MAX_ERROR_LEN` above the seam). Numbered after the job's latest record, found at the end
    /// of the job's range of the primary key.
    RECORD_ATTEMPT = "
    INSERT INTO fenceq_attempts (job_id, seq, attempt, claim_id, outcome, worker, started_at, ended_at, error)
    SELECT id, coalesce((SELECT max(a.seq) FROM fenceq_attempts AS a WHERE a.job_id = :id), 0) + 1,
           attempt, claim_id, :outcome, worker, :started, :now, last_error
    FROM   fenceq_jobs
    WHERE  id = :id";

    /// The record of the attempt a claim at `:now` takes over from job `:id`, whose lease ran out
    /// (`lapsed` in the claim's selection), started at `:started`: run before the claim's
    /// update, while the row still holds the attempt, in the claim's transaction, with the
    /// reaper's text for the same end.
    RECORD_EXPIRED_LEASE = "
    INSERT INTO fenceq_attempts (job_id, seq, attempt, claim_id, outcome, worker, started_at, ended_at, error)
    SELECT id, coalesce((SELECT max(a.seq) FROM fenceq_attempts AS a WHERE a.job_id = :id), 0) + 1,
           attempt, claim_id, 'lease_expired', worker, :started, :now, 'lease expired (worker ' || worker || ')'
    FROM   fenceq_jobs
    WHERE  id = :id AND state = 'running' AND lease_until <= :now";

    /// Up to `:limit` records of job `:id`, newest first (the primary key read backwards).
    ATTEMPTS = "
    SELECT attempt, claim_id, outcome, worker, started_at, ended_at, error
    FROM   fenceq_attempts
    WHERE  job_id = :id
    ORDER  BY seq DESC
    LIMIT  :limit";

    /// A pruned job's records, in the prune's transaction (its range of the primary key).
    FORGET_ATTEMPTS = "
    DELETE FROM fenceq_attempts WHERE job_id = :id";
}
