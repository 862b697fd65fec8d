//! PostgreSQL's errors as fenceq's.
//!
//! diesel 2.3 (2.3.14 read) classifies a few SQLSTATEs into `DatabaseErrorKind`
//! (serialization failure 40001, read-only transaction 25006, the integrity violations, the
//! connection exceptions 08000/08001/08004/08006, and any error after which libpq reports
//! the connection bad) and exposes no SQLSTATE for the others: its
//! `DatabaseErrorInformation` carries the message, detail, hint, table, column, constraint
//! and position, not the code (diesel-rs/diesel#5232), and reading it from libpq ourselves
//! would take `unsafe`, which fenceq forbids. Those kinds are used first; the rest is
//! recognised by the server's primary message. That is the one place fenceq reads a message,
//! and only because nothing else carries the code. Messages are translated by the session's
//! `lc_messages`, so every session of the queue asks for the untranslated `C` messages
//! where its role may set them (a superuser, or one granted `SET ON PARAMETER lc_messages`);
//! on a server whose messages are translated and whose role may not, errors still get
//! through as `Error::Postgres`, only less finely typed.
//!
//! | SQLSTATE | meaning | fenceq |
//! |---|---|---|
//! | 40001 serialization_failure (also a standby's recovery conflict) | conflict | `Busy`, fenceq's own transaction re-run first |
//! | 40P01 deadlock_detected | conflict | `Busy`, fenceq's own transaction re-run first |
//! | 55P03 lock_not_available (`lock_timeout`), 57014 query_canceled (`statement_timeout`), 53300 too_many_connections | waited too long | `Busy` |
//! | 53100 disk_full | | `StorageFull` |
//! | 25006 read_only_sql_transaction (`default_transaction_read_only`, a hot standby) | | `ReadOnly` |
//! | 25P02 in_failed_sql_transaction | an earlier statement failed | `TransactionLost` |
//! | 08xxx, 57P01..57P03, 25P03 idle_in_transaction_session_timeout, libpq's lost connection | | `ConnectionLost` (the pool replaces the connection) |
//! | anything else | | `Postgres` with the server's message |
//!
//! A conflict is a `Busy` whose cause is `BusyCause::Deadlock` or
//! `BusyCause::SerializationFailure` (`Error::is_conflict`): the queue re-runs its own
//! transactions after one (`queue/retry.rs`), never a caller's closure.

use crate::error::{BusyCause, Error, Result};
use diesel::result::{DatabaseErrorKind, Error as DieselError};

/// What a server message says, when diesel gives no kind for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    /// 40P01 deadlock_detected.
    Deadlock,
    /// 55P03 lock_not_available (lock_timeout, `NOWAIT`), 57014 query_canceled
    /// (statement_timeout), 53300 too_many_connections.
    Busy,
    /// 53100 disk_full, and the "could not extend file" of a full disk.
    Full,
    /// 25P02 in_failed_sql_transaction: an earlier statement failed and the transaction can
    /// only roll back.
    Aborted,
    /// 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, and libpq's
    /// own words for a connection that went away; also 25P03
    /// idle_in_transaction_session_timeout, which ends the session.
    Gone,
    Other,
}

fn said(message: &str) -> Said {
    let m = message.to_ascii_lowercase();
    if m.contains("deadlock detected") {
        Said::Deadlock
    } else if m.contains("lock timeout")
        || m.contains("statement timeout")
        || m.contains("could not obtain lock")
        || m.contains("too many clients")
        || m.contains("too many connections")
        || m.contains("remaining connection slots")
    {
        Said::Busy
    } else if m.contains("no space left on device") || m.contains("could not extend file") || m.contains("disk full") {
        Said::Full
    } else if m.contains("current transaction is aborted") {
        Said::Aborted
    } else if m.contains("terminating connection")
        || m.contains("server closed the connection")
        || m.contains("the database system is shutting down")
        || m.contains("the database system is starting up")
        || m.contains("the database system is in recovery mode")
        || m.contains("no connection to the server")
        || m.contains("connection to server")
        || m.contains("idle-in-transaction timeout")
    {
        Said::Gone
    } else {
        Said::Other
    }
}

impl Error {
    /// Classifies a diesel error raised by `statement` into its typed variant.
    pub(crate) fn postgres(statement: &'static str, source: DieselError) -> Self {
        let (kind, message) = match &source {
            DieselError::DatabaseError(kind, info) => (Some(kind), info.message().to_string()),
            DieselError::BrokenTransactionManager => return Error::ConnectionLost { statement, commit_unknown: false },
            _ => (None, String::new()),
        };
        match kind {
            Some(DatabaseErrorKind::SerializationFailure) => {
                return Error::Busy { statement, cause: BusyCause::SerializationFailure }
            }
            Some(DatabaseErrorKind::ReadOnlyTransaction) => return Error::ReadOnly { statement },
            Some(DatabaseErrorKind::ClosedConnection) => {
                return Error::ConnectionLost { statement, commit_unknown: false }
            }
            _ => {}
        }
        match said(&message) {
            Said::Deadlock => Error::Busy { statement, cause: BusyCause::Deadlock },
            Said::Busy => Error::Busy { statement, cause: BusyCause::Locked },
            Said::Full => Error::StorageFull { statement },
            Said::Aborted => Error::TransactionLost,
            Said::Gone => Error::ConnectionLost { statement, commit_unknown: false },
            Said::Other => Error::Postgres { statement, source: std::sync::Arc::new(source) },
        }
    }
}

/// Where a call was when its connection broke, for whether its work may have committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Inside a transaction, before its `COMMIT` was sent: the server rolls back the
    /// transaction of a session that ends, so nothing was written.
    Transaction,
    /// At the commit, with the session found ended before the `COMMIT` was sent (the
    /// server's goodbye already read): nothing was committed.
    CommitNotSent,
    /// After the `COMMIT` was sent: it may have committed before the connection broke.
    CommitSent,
    /// In autocommit, where each statement commits as it ends: the work may have committed
    /// when a statement that writes was sent (`wrote`), else nothing was written.
    Autocommit {
        /// Whether a statement that writes was sent on the connection during the call.
        wrote: bool,
    },
}

/// `error` with what its phase says of the work: a `ConnectionLost` says whether the work
/// may have committed (`commit_unknown`); any other error is returned as it is.
pub(crate) fn lost_in(phase: Phase, error: Error) -> Error {
    match error {
        Error::ConnectionLost { statement, .. } => {
            let commit_unknown = match phase {
                Phase::Transaction | Phase::CommitNotSent => false,
                Phase::CommitSent => true,
                Phase::Autocommit { wrote } => wrote,
            };
            Error::ConnectionLost { statement, commit_unknown }
        }
        other => other,
    }
}

/// From `diesel::result::Error`: errors raised by SQL a caller runs in a closure's
/// transaction ([`PgTx`](super::PgTx)), classified like the store's own, so that `?` works
/// inside `with_ownership`, `complete_with` and `transaction` closures.
impl From<DieselError> for Error {
    fn from(e: DieselError) -> Self {
        Error::postgres(CALLER_STATEMENT, e)
    }
}

/// The statement name of errors raised by a caller's own SQL.
pub(crate) const CALLER_STATEMENT: &str = "caller transaction";

/// Adds the statement name to a diesel result (`.pg(CLAIM)?` for a [`Stmt`](crate::store::Stmt), or a name).
pub(crate) trait PgContext<T> {
    fn pg(self, statement: impl Into<&'static str>) -> Result<T>;
}

impl<T> PgContext<T> for diesel::QueryResult<T> {
    fn pg(self, statement: impl Into<&'static str>) -> Result<T> {
        let statement = statement.into();
        self.map_err(|e| Error::postgres(statement, e))
    }
}

/// `url` with any password replaced by `***`, for messages and `Debug` (the userinfo's
/// password of a URL, and a `password=` parameter of a URL or a key/value string).
pub(crate) fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..].find(['/', '?', '#']).map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    let lower = out.to_ascii_lowercase();
    if let Some(at) = lower.find("password=") {
        let start = at + "password=".len();
        let end = out[start..].find(['&', ' ', '#']).map_or(out.len(), |i| start + i);
        out.replace_range(start..end, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_error(kind: DatabaseErrorKind, message: &str) -> DieselError {
        DieselError::DatabaseError(kind, Box::new(message.to_string()))
    }

    /// What a classified error must look like.
    type Expected = fn(&Error) -> bool;

    #[test]
    fn server_errors_are_classified() {
        let unknown = DatabaseErrorKind::Unknown;
        let cases: Vec<(DieselError, Expected)> = vec![
            (db_error(DatabaseErrorKind::SerializationFailure, "could not serialize access"), |e| {
                matches!(e, Error::Busy { .. }) && e.is_conflict()
            }),
            (db_error(unknown, "deadlock detected"), |e| matches!(e, Error::Busy { .. }) && e.is_conflict()),
            (db_error(unknown, "could not obtain lock on row in relation \"fenceq_jobs\""), |e| {
                matches!(e, Error::Busy { .. }) && !e.is_conflict()
            }),
            (
                db_error(DatabaseErrorKind::SerializationFailure, "canceling statement due to conflict with recovery"),
                |e| matches!(e, Error::Busy { .. }) && e.is_conflict(),
            ),
            (db_error(unknown, "could not write to file \"pg_wal/xlogtemp.1\": No space left on device"), |e| {
                matches!(e, Error::StorageFull { .. })
            }),
            (db_error(DatabaseErrorKind::ReadOnlyTransaction, "cannot execute INSERT during recovery"), |e| {
                matches!(e, Error::ReadOnly { .. })
            }),
            (db_error(unknown, "terminating connection due to idle-in-transaction timeout"), |e| {
                matches!(e, Error::ConnectionLost { .. })
            }),
            (db_error(unknown, "the database system is in recovery mode"), |e| {
                matches!(e, Error::ConnectionLost { .. })
            }),
            (db_error(unknown, "canceling statement due to lock timeout"), |e| {
                matches!(e, Error::Busy { .. }) && !e.is_conflict()
            }),
            (db_error(unknown, "canceling statement due to statement timeout"), |e| {
                matches!(e, Error::Busy { .. }) && !e.is_conflict()
            }),
            (db_error(unknown, "sorry, too many clients already"), |e| matches!(e, Error::Busy { .. })),
            (db_error(unknown, "could not extend file \"base/1/2\": No space left on device"), |e| {
                matches!(e, Error::StorageFull { .. })
            }),
            (
                db_error(DatabaseErrorKind::ReadOnlyTransaction, "cannot execute UPDATE in a read-only transaction"),
                |e| matches!(e, Error::ReadOnly { .. }),
            ),
            (
                db_error(unknown, "current transaction is aborted, commands ignored until end of transaction block"),
                |e| matches!(e, Error::TransactionLost),
            ),
            (db_error(DatabaseErrorKind::ClosedConnection, "server closed the connection unexpectedly"), |e| {
                matches!(e, Error::ConnectionLost { .. })
            }),
            (db_error(unknown, "terminating connection due to administrator command"), |e| {
                matches!(e, Error::ConnectionLost { .. })
            }),
            (db_error(DatabaseErrorKind::CheckViolation, "new row violates check constraint"), |e| {
                matches!(e, Error::Postgres { .. })
            }),
        ];
        for (source, expected) in cases {
            let shown = source.to_string();
            let e = Error::postgres("S", source);
            assert!(expected(&e), "{shown} became {e:?}");
        }
        assert!(Error::postgres("S", db_error(unknown, "deadlock detected")).is_retryable());
    }

    #[test]
    fn a_conflict_names_its_statement_and_its_kind() {
        let deadlock = Error::postgres("CLAIM", db_error(DatabaseErrorKind::Unknown, "deadlock detected"));
        assert!(matches!(deadlock, Error::Busy { statement: "CLAIM", cause: BusyCause::Deadlock }), "{deadlock:?}");
        assert!(deadlock.is_conflict());
        let shown = deadlock.to_string();
        assert!(shown.contains("CLAIM (deadlock)"), "{shown}");
        let serialization = Error::postgres("COMMIT", db_error(DatabaseErrorKind::SerializationFailure, "x"));
        assert!(matches!(serialization, Error::Busy { statement: "COMMIT", cause: BusyCause::SerializationFailure }));
        assert!(serialization.is_conflict());
        let timeout =
            Error::postgres("CLAIM", db_error(DatabaseErrorKind::Unknown, "canceling statement due to lock timeout"));
        assert!(
            matches!(timeout, Error::Busy { cause: BusyCause::Locked, .. }) && !timeout.is_conflict(),
            "{timeout:?}"
        );
    }

    #[test]
    fn a_lost_connection_says_whether_the_work_may_have_committed() {
        let lost = || db_error(DatabaseErrorKind::ClosedConnection, "server closed the connection unexpectedly");
        let terminated = || db_error(DatabaseErrorKind::Unknown, "terminating connection due to administrator command");
        let cases = [
            (Phase::Transaction, false),
            (Phase::CommitNotSent, false),
            (Phase::CommitSent, true),
            (Phase::Autocommit { wrote: false }, false),
            (Phase::Autocommit { wrote: true }, true),
        ];
        for (phase, unknown) in cases {
            for source in [lost(), terminated(), DieselError::BrokenTransactionManager] {
                let e = lost_in(phase, Error::postgres("S", source));
                assert!(
                    matches!(e, Error::ConnectionLost { statement: "S", commit_unknown } if commit_unknown == unknown),
                    "{phase:?}: {e:?}"
                );
                assert_eq!(e.is_retryable(), !unknown, "{phase:?}");
                let shown = e.to_string();
                if unknown {
                    assert!(shown.contains("may have committed") && shown.contains("idempotency keys"), "{shown}");
                } else {
                    assert!(shown.contains("nothing was written") && shown.contains("retry the call"), "{shown}");
                }
            }
            // Any other error passes as it is.
            let busy = lost_in(phase, Error::postgres("S", db_error(DatabaseErrorKind::Unknown, "deadlock detected")));
            assert!(matches!(busy, Error::Busy { .. }), "{busy:?}");
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://bot:s3cret@db:5432/app"), "postgres://bot:***@db:5432/app");
        assert_eq!(redact("postgres://bot@db/app"), "postgres://bot@db/app");
        assert_eq!(redact("postgresql://u:p%40ss@h/d?sslmode=require"), "postgresql://u:***@h/d?sslmode=require");
        assert_eq!(redact("postgres://h/d?user=u&password=s3cret&x=1"), "postgres://h/d?user=u&password=***&x=1");
        assert_eq!(redact("host=h password=s3cret dbname=d"), "host=h password=*** dbname=d");
    }
}
