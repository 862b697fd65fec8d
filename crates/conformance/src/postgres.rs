//! The kit's harness for fenceq's PostgreSQL store (feature `postgres`): each test gets a
//! schema of its own in the database of the URL (created at the start, dropped with
//! everything in it at the end), and reads it raw through a connection of its own.

use crate::harness::{Harness, RawRow};
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::sql_types::{BigInt, Binary, Nullable, Text};
use diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{ManualClock, PgTx, PostgresStore, Queue};

/// The variable that names the test server: `postgres://postgres@127.0.0.1:PORT/fenceq_test`
/// (`scripts/postgres start` prints it, `scripts/postgres env` exports it).
pub const URL_VARIABLE: &str = "FENCEQ_POSTGRES_URL";

/// Runs the kit against [`PostgresStore`]: `fenceq_conformance::run(PostgresHarness::new(url))`.
#[derive(Debug, Clone)]
pub struct PostgresHarness {
    url: String,
}

impl PostgresHarness {
    /// A harness on the database at `url` (its tests live in schemas of their own there).
    pub fn new(url: impl Into<String>) -> Self {
        PostgresHarness { url: url.into() }
    }

    /// The harness named by [`URL_VARIABLE`]: `Ok(None)` when the variable is unset or
    /// empty, `Err` (saying why, without the password) when its server cannot be reached.
    pub fn from_env() -> Result<Option<Self>, String> {
        let url = match std::env::var(URL_VARIABLE) {
            Ok(url) if !url.trim().is_empty() => url,
            _ => return Ok(None),
        };
        let harness = PostgresHarness::new(url);
        match PgConnection::establish(&harness.connect_url()) {
            Ok(_) => Ok(Some(harness)),
            Err(e) => Err(format!("{URL_VARIABLE} is set but its server cannot be reached: {e}")),
        }
    }

    fn connect_url(&self) -> String {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        if self.url.contains("connect_timeout=") {
            self.url.clone()
        } else {
            format!("{}{separator}connect_timeout=10", self.url)
        }
    }
}

/// One test's schema (dropped, with every table in it, when the test ends).
pub struct PostgresPlace {
    url: String,
    schema: String,
}

impl std::fmt::Debug for PostgresPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresPlace").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl PostgresPlace {
    /// The test's schema.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A connection of the test's own, its `search_path` on the test's schema.
    fn raw(&self) -> PgConnection {
        let mut conn = PgConnection::establish(&self.url).expect("a raw connection to the test server");
        conn.batch_execute(&format!(
            "SET search_path TO \"{}\", public; SET lock_timeout = '30s'; SET statement_timeout = '60s'",
            self.schema
        ))
        .expect("the raw connection's session settings");
        conn
    }
}

impl Drop for PostgresPlace {
    fn drop(&mut self) {
        let dropped = PgConnection::establish(&self.url).and_then(|mut conn| {
            conn.batch_execute(&format!("SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema))
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
        });
        if let Err(e) = dropped {
            eprintln!("the test schema {} was left behind: {e}", self.schema);
        }
    }
}

#[derive(QueryableByName)]
struct SnapshotRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = BigInt)]
    attempt: i64,
    #[diesel(sql_type = Nullable<Binary>)]
    claim_id: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lease_until: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Reply {
    #[diesel(sql_type = BigInt)]
    job: i64,
    #[diesel(sql_type = BigInt)]
    attempt: i64,
    #[diesel(sql_type = Text)]
    text: String,
}

impl Harness for PostgresHarness {
    type Store = PostgresStore;
    type Place = PostgresPlace;

    fn create(&self) -> PostgresPlace {
        let schema = format!("fenceq_kit_{}", uuid::Uuid::new_v4().simple());
        // The schema is created by the queue's open (which creates a missing one); the
        // place only has to drop it.
        PostgresPlace { url: self.connect_url(), schema }
    }

    fn open(&self, place: &PostgresPlace, clock: &ManualClock, max_attempts: Option<u32>) -> Queue<PostgresStore> {
        let mut builder = Queue::builder().url(self.url.clone()).schema(place.schema.clone()).clock(clock.clone());
        if let Some(attempts) = max_attempts {
            builder = builder.max_attempts(attempts);
        }
        builder.open_postgres().expect("opening the test schema")
    }

    fn snapshot(&self, place: &PostgresPlace) -> Vec<RawRow> {
        let rows = sql_query(
            "SELECT id, state, attempt::bigint AS attempt, uuid_send(claim_id) AS claim_id, lease_until, last_error
             FROM fenceq_jobs ORDER BY id",
        )
        .load::<SnapshotRow>(&mut place.raw())
        .unwrap();
        rows.into_iter().map(|r| (r.id, r.state, r.attempt, r.claim_id, r.lease_until, r.last_error)).collect()
    }

    fn count(&self, place: &PostgresPlace, state: &str) -> i64 {
        sql_query("SELECT count(*) AS n FROM fenceq_jobs WHERE state = $1")
            .bind::<Text, _>(state)
            .get_result::<Count>(&mut place.raw())
            .unwrap()
            .n
    }

    /// Creates the test's schema first when the queue has not been opened yet (as in
    /// [`Harness::create_scratch`]'s default): otherwise the table would land in the next
    /// schema of the `search_path`, `public`, shared by every test.
    fn create_replies(&self, place: &PostgresPlace) {
        place
            .raw()
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS \"{}\";
                 CREATE TABLE \"{}\".replies (seq BIGINT GENERATED ALWAYS AS IDENTITY, job BIGINT, attempt BIGINT,
                                               text TEXT)",
                place.schema, place.schema
            ))
            .unwrap();
    }

    fn insert_reply(tx: &PgTx, job: i64, attempt: i64, text: &str) -> fenceq::Result<()> {
        sql_query("INSERT INTO replies (job, attempt, text) VALUES ($1, $2, $3)")
            .bind::<BigInt, _>(job)
            .bind::<BigInt, _>(attempt)
            .bind::<Text, _>(text)
            .execute(&mut *tx.conn())?;
        Ok(())
    }

    fn replies(&self, place: &PostgresPlace) -> Vec<(i64, i64, String)> {
        sql_query("SELECT job, attempt, text FROM replies ORDER BY seq")
            .load::<Reply>(&mut place.raw())
            .unwrap()
            .into_iter()
            .map(|r| (r.job, r.attempt, r.text))
            .collect()
    }

    fn replies_in(tx: &PgTx) -> fenceq::Result<Vec<(i64, i64, String)>> {
        let rows = sql_query("SELECT job, attempt, text FROM replies ORDER BY seq").load::<Reply>(&mut *tx.conn())?;
        Ok(rows.into_iter().map(|r| (r.job, r.attempt, r.text)).collect())
    }

    /// Empties the schema through the queue's own connection: every job, reply, pause, queue
    /// setting, limit, recorded start and schedule record, and the ids' sequences (`RESTART
    /// IDENTITY`), so that the model's next run neither creates a schema nor migrates one.
    fn recycle(&self, _place: &PostgresPlace, queue: &Queue<PostgresStore>) -> bool {
        queue
            .transaction(|tx| {
                tx.conn()
                    .batch_execute("TRUNCATE fenceq_jobs, fenceq_attempts, fenceq_settled_counts, replies, fenceq_queues, fenceq_queue_flow, fenceq_limits, fenceq_starts, fenceq_schedules RESTART IDENTITY")?;
                Ok(())
            })
            .expect("emptying a scratch schema");
        true
    }

    fn foreign_transaction(&self, place: &PostgresPlace, commit: bool, f: &mut dyn FnMut(&PgTx)) {
        let mut conn = place.raw();
        AnsiTransactionManager::begin_transaction(&mut conn).unwrap();
        let tx = PgTx::new(conn);
        f(&tx);
        let mut conn = tx.into_connection().expect("the harness's own connection");
        if commit {
            AnsiTransactionManager::commit_transaction(&mut conn).unwrap();
        } else {
            AnsiTransactionManager::rollback_transaction(&mut conn).unwrap();
        }
    }

    fn fail_claims(&self, place: &PostgresPlace, fail: bool) {
        let sql = if fail {
            "CREATE FUNCTION fenceq_kit_refuse_claims() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.attempt > OLD.attempt THEN RAISE EXCEPTION 'claims refused by the kit'; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER fenceq_kit_refuse_claims BEFORE UPDATE OF attempt ON fenceq_jobs
             FOR EACH ROW EXECUTE FUNCTION fenceq_kit_refuse_claims();"
        } else {
            "DROP TRIGGER fenceq_kit_refuse_claims ON fenceq_jobs; DROP FUNCTION fenceq_kit_refuse_claims();"
        };
        place.raw().batch_execute(sql).unwrap();
    }
}
