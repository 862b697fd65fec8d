//! PostgreSQL's errors as fenceq's.
//!
//! diesel 2.3 classifies a few SQLSTATEs into `DatabaseErrorKind` (serialization failure
//! 40001, read-only transaction 25006, the integrity violations, the connection exceptions
//! 08xxx) and does not expose the SQLSTATE of the others (a pull request adding an accessor
//! is open upstream). Those kinds are used first; the rest is recognised by the server's
//! primary message, which is stable in the C/English locale the messages are written in by
//! default (`lc_messages`). A server whose messages are translated still gets every error
//! through, as `Error::Postgres`, just less finely typed.

use crate::error::{Error, Result};
use diesel::result::{DatabaseErrorKind, Error as DieselError};

/// What a server message says, when diesel gives no kind for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    /// 40P01 deadlock_detected, 55P03 lock_not_available (lock_timeout), 57014
    /// query_canceled (statement_timeout), 53300 too_many_connections.
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
    if m.contains("deadlock detected")
        || m.contains("lock timeout")
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
            DieselError::BrokenTransactionManager => return Error::ConnectionLost { statement },
            _ => (None, String::new()),
        };
        match kind {
            Some(DatabaseErrorKind::SerializationFailure) => return Error::Busy { statement },
            Some(DatabaseErrorKind::ReadOnlyTransaction) => return Error::ReadOnly { statement },
            Some(DatabaseErrorKind::ClosedConnection) => return Error::ConnectionLost { statement },
            _ => {}
        }
        match said(&message) {
            Said::Busy => Error::Busy { statement },
            Said::Full => Error::StorageFull { statement },
            Said::Aborted => Error::TransactionLost,
            Said::Gone => Error::ConnectionLost { statement },
            Said::Other => Error::Postgres { statement, source },
        }
    }
}

/// From `diesel::result::Error`: errors raised by SQL a caller runs in a closure's
/// transaction ([`PgTx`](super::PgTx)), classified like the store's own, so that `?` works
/// inside `with_ownership`, `complete_with` and `transaction` closures.
impl From<DieselError> for Error {
    fn from(e: DieselError) -> Self {
        Error::postgres("caller transaction", e)
    }
}

/// Adds the statement name to a diesel result (`.pg("CLAIM")?`).
pub(crate) trait PgContext<T> {
    fn pg(self, statement: &'static str) -> Result<T>;
}

impl<T> PgContext<T> for diesel::QueryResult<T> {
    fn pg(self, statement: &'static str) -> Result<T> {
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
                matches!(e, Error::Busy { .. })
            }),
            (db_error(unknown, "deadlock detected"), |e| matches!(e, Error::Busy { .. })),
            (db_error(unknown, "canceling statement due to lock timeout"), |e| matches!(e, Error::Busy { .. })),
            (db_error(unknown, "canceling statement due to statement timeout"), |e| matches!(e, Error::Busy { .. })),
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
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://bot:s3cret@db:5432/app"), "postgres://bot:***@db:5432/app");
        assert_eq!(redact("postgres://bot@db/app"), "postgres://bot@db/app");
        assert_eq!(redact("postgresql://u:p%40ss@h/d?sslmode=require"), "postgresql://u:***@h/d?sslmode=require");
        assert_eq!(redact("postgres://h/d?user=u&password=s3cret&x=1"), "postgres://h/d?user=u&password=***&x=1");
        assert_eq!(redact("host=h password=s3cret dbname=d"), "host=h password=*** dbname=d");
    }
}
