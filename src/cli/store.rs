//! Where the CLI's commands meet a store: opening the `--db` target the way a command needs
//! it (to change rows, to read only, or creating it), reading its schema version without
//! upgrading it, and the few statements the demo runs on a caller's transaction.
//!
//! Every command is written once, generic over [`CliStore`]; [`super::Command::run`] picks
//! the store once, from `--db`: a PostgreSQL URL or libpq key/value string
//! ([`fenceq::is_connection_string`]) opens PostgreSQL (feature `postgres`), anything else
//! is an SQLite file.

use super::{check_existing, fail, CliResult, Context};
use fenceq::store::{Store, StoreOptions};
use fenceq::{Queue, QueueBuilder, SqliteOptions, SqliteStore};

/// What a command does with the database it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// An existing queue at this build's schema, to change rows: a missing database is an
    /// error, and an older schema is an error that says to run `fenceq migrate`.
    Existing,
    /// An existing queue for reading only: never created, switched or upgraded.
    ReadOnly,
    /// Created (or upgraded) when missing: `enqueue`, `migrate`, `demo`.
    OrCreate,
}

/// A store the CLI can work on.
pub trait CliStore: Store {
    /// The store's name in messages: `SQLite` or `PostgreSQL`.
    const NAME: &'static str;

    /// The store's own settings, which open it.
    type Options: StoreOptions<Store = Self>;

    /// Opens `--db` as `how` says.
    ///
    /// # Errors
    ///
    /// A missing database (SQLite), one without a fenceq schema (`Existing`, `ReadOnly`), an
    /// older or newer schema, and the store's own errors while connecting.
    fn open(ctx: &Context, how: Open) -> CliResult<Queue<Self>>;

    /// Opens `--db`, creating or upgrading it, with the settings `tune` adds (the demo's
    /// pool size and attempts).
    ///
    /// # Errors
    ///
    /// As [`CliStore::open`] with [`Open::OrCreate`], and the builder's refusal of a setting.
    fn open_with(
        ctx: &Context,
        tune: impl FnOnce(QueueBuilder<Self::Options>) -> QueueBuilder<Self::Options>,
    ) -> CliResult<Queue<Self>>;

    /// The schema version of `--db` without changing anything: `None` when there is no
    /// database yet (a missing SQLite file), 0 when it holds no fenceq schema.
    ///
    /// # Errors
    ///
    /// The store's errors while reading it (not a database, no connection).
    fn version_of(ctx: &Context) -> CliResult<Option<i64>>;

    /// The demo's `demo_replies` table, created if it is missing (autocommit).
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn demo_create_replies(queue: &Queue<Self>) -> fenceq::Result<()>;

    /// Inserts one reply row inside the caller's transaction `tx`.
    ///
    /// # Errors
    ///
    /// The store's errors (a second reply for one update violates the primary key).
    fn demo_insert_reply(tx: &Self::Tx, update: i64, attempt: i64, text: &str) -> fenceq::Result<()>;

    /// How many reply rows the demo wrote.
    ///
    /// # Errors
    ///
    /// The store's errors.
    fn demo_count_replies(queue: &Queue<Self>) -> fenceq::Result<u64>;
}

impl CliStore for SqliteStore {
    const NAME: &'static str = "SQLite";
    type Options = SqliteOptions;

    fn open(ctx: &Context, how: Open) -> CliResult<Queue<Self>> {
        match how {
            Open::OrCreate => Self::open_with(ctx, |builder| builder),
            Open::Existing | Open::ReadOnly => {
                check_existing(&ctx.db)?;
                if SqliteStore::schema_version_of(&ctx.db)? == 0 {
                    return Err(no_queue(ctx));
                }
                let builder = Queue::builder().path(&ctx.db);
                let builder = if how == Open::ReadOnly { builder.read_only(true) } else { builder.upgrade(false) };
                Ok(builder.open()?)
            }
        }
    }

    fn open_with(
        ctx: &Context,
        tune: impl FnOnce(QueueBuilder<SqliteOptions>) -> QueueBuilder<SqliteOptions>,
    ) -> CliResult<Queue<Self>> {
        ctx.check_not_dir()?;
        Ok(tune(Queue::builder().path(&ctx.db)).open()?)
    }

    fn version_of(ctx: &Context) -> CliResult<Option<i64>> {
        ctx.check_not_dir()?;
        if !ctx.db.exists() {
            return Ok(None);
        }
        Ok(Some(SqliteStore::schema_version_of(&ctx.db)?))
    }

    fn demo_create_replies(queue: &Queue<Self>) -> fenceq::Result<()> {
        queue.with_connection(|conn| {
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS demo_replies (
                     update_id INTEGER PRIMARY KEY,
                     attempt   INTEGER NOT NULL,
                     text      TEXT    NOT NULL)",
            )?;
            Ok(())
        })
    }

    fn demo_insert_reply(tx: &Self::Tx, update: i64, attempt: i64, text: &str) -> fenceq::Result<()> {
        tx.execute("INSERT INTO demo_replies VALUES (?1, ?2, ?3)", (update, attempt, text))?;
        Ok(())
    }

    fn demo_count_replies(queue: &Queue<Self>) -> fenceq::Result<u64> {
        queue.with_connection(|conn| {
            Ok(conn.query_row("SELECT count(*) FROM demo_replies", [], |r| r.get::<_, i64>(0))? as u64)
        })
    }
}

/// "DB holds no fenceq queue", for a database without a fenceq schema.
pub fn no_queue(ctx: &Context) -> super::BoxError {
    fail(format!("{} holds no fenceq queue (schema version 0); `fenceq migrate` creates one", ctx.db_display()))
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::{no_queue, CliStore, Open};
    use crate::cli::{fail, BoxError, CliResult, Context};
    use fenceq::diesel::sql_types::{BigInt, Text};
    use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
    use fenceq::{Error, PostgresOptions, PostgresStore, Queue, QueueBuilder};

    /// The builder for `--db URL` and `--schema` (the library adds its connect timeout,
    /// application name and GSS setting to the URL).
    fn builder(ctx: &Context) -> QueueBuilder<PostgresOptions> {
        let builder = Queue::builder().url(ctx.db.to_string_lossy().into_owned());
        match &ctx.schema {
            Some(schema) => builder.schema(schema.clone()),
            None => builder,
        }
    }

    /// The schemas of `--db`'s database that hold fenceq tables (empty when they cannot be
    /// listed: the advice is then the plain one).
    fn schemas_with_queues(ctx: &Context) -> Vec<String> {
        #[derive(QueryableByName)]
        struct Name {
            #[diesel(sql_type = Text)]
            name: String,
        }
        let Ok(mut conn) = PgConnection::establish(&ctx.server_url()) else { return Vec::new() };
        sql_query(
            "SELECT n.nspname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relname = 'fenceq_schema_version' AND c.relkind IN ('r', 'p') ORDER BY 1",
        )
        .load::<Name>(&mut conn)
        .map(|names| names.into_iter().map(|n| n.name).collect())
        .unwrap_or_default()
    }

    /// "DB holds no fenceq queue". Without `--schema`, when other schemas of the database
    /// hold one, it names them and `--schema` instead: the usual cause is a forgotten
    /// `--schema`, and `fenceq migrate` would then create a second, empty queue beside the
    /// real one. (With `--schema`, the plain advice: a new schema is migrated first.)
    fn no_queue_here(ctx: &Context) -> BoxError {
        if ctx.schema.is_some() {
            return no_queue(ctx);
        }
        let found = schemas_with_queues(ctx);
        let Some(first) = found.first() else { return no_queue(ctx) };
        let holds = if found.len() == 1 { "schema" } else { "schemas" };
        fail(format!(
            "{} holds no fenceq queue in its default schema (no --schema given; schema version 0), but {holds} {} \
             of this database {}: pass --schema {first} to use it (`fenceq migrate` without --schema would create \
             a second, empty queue)",
            ctx.db_display(),
            found.join(", "),
            if found.len() == 1 { "holds one" } else { "hold one each" },
        ))
    }

    impl CliStore for PostgresStore {
        const NAME: &'static str = "PostgreSQL";
        type Options = PostgresOptions;

        fn open(ctx: &Context, how: Open) -> CliResult<Queue<Self>> {
            let builder = builder(ctx);
            let opened = match how {
                Open::OrCreate => return Self::open_with(ctx, |builder| builder),
                // Read-only sessions (default_transaction_read_only): a preview cannot write.
                Open::ReadOnly => builder.read_only(true).open(),
                Open::Existing => builder.upgrade(false).open(),
            };
            match opened {
                Err(Error::SchemaTooOld { found: 0, .. }) => Err(no_queue_here(ctx)),
                other => Ok(other?),
            }
        }

        fn open_with(
            ctx: &Context,
            tune: impl FnOnce(QueueBuilder<PostgresOptions>) -> QueueBuilder<PostgresOptions>,
        ) -> CliResult<Queue<Self>> {
            Ok(tune(builder(ctx)).open()?)
        }

        fn version_of(ctx: &Context) -> CliResult<Option<i64>> {
            // A read-only open checks the version and changes nothing; its refusals say which.
            match builder(ctx).read_only(true).open() {
                Ok(queue) => Ok(Some(queue.schema_version()?)),
                Err(Error::SchemaTooOld { found, .. } | Error::SchemaTooNew { found, .. }) => Ok(Some(found)),
                Err(e) => Err(e.into()),
            }
        }

        fn demo_create_replies(queue: &Queue<Self>) -> fenceq::Result<()> {
            queue.with_connection(|tx| {
                sql_query(
                    "CREATE TABLE IF NOT EXISTS demo_replies (
                         update_id BIGINT PRIMARY KEY,
                         attempt   BIGINT NOT NULL,
                         text      TEXT   NOT NULL)",
                )
                .execute(&mut *tx.conn())?;
                Ok(())
            })
        }

        fn demo_insert_reply(tx: &Self::Tx, update: i64, attempt: i64, text: &str) -> fenceq::Result<()> {
            sql_query("INSERT INTO demo_replies VALUES ($1, $2, $3)")
                .bind::<BigInt, _>(update)
                .bind::<BigInt, _>(attempt)
                .bind::<Text, _>(text)
                .execute(&mut *tx.conn())?;
            Ok(())
        }

        fn demo_count_replies(queue: &Queue<Self>) -> fenceq::Result<u64> {
            #[derive(QueryableByName)]
            struct Count {
                #[diesel(sql_type = BigInt)]
                n: i64,
            }
            queue.with_connection(|tx| {
                let count: Count = sql_query("SELECT count(*) AS n FROM demo_replies").get_result(&mut *tx.conn())?;
                Ok(count.n as u64)
            })
        }
    }
}
