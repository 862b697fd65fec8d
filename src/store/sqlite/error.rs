//! SQLite's errors as fenceq's: the classification of every rusqlite error by its code, the
//! statement name it carries.

use crate::error::{BusyCause, Error, Result};
use rusqlite::ErrorCode;

impl Error {
    /// Classifies a rusqlite error raised by `statement` into its typed variant.
    pub(crate) fn sqlite(statement: &'static str, source: rusqlite::Error) -> Self {
        let code = match &source {
            rusqlite::Error::SqliteFailure(e, _) => Some(e.code),
            _ => None,
        };
        match code {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                Error::Busy { statement, cause: BusyCause::Locked }
            }
            Some(ErrorCode::DiskFull) => Error::StorageFull { statement },
            Some(ErrorCode::ReadOnly) => Error::ReadOnly { statement },
            Some(ErrorCode::OutOfMemory) => Error::OutOfMemory { statement },
            Some(ErrorCode::TooBig) => Error::TooBig { statement },
            Some(ErrorCode::DatabaseCorrupt) => Error::Corrupt { statement },
            Some(ErrorCode::NotADatabase) => Error::NotADatabase { path: String::new() },
            _ => Error::Sqlite { statement, source: std::sync::Arc::new(source) },
        }
    }
}

/// From `rusqlite::Error`: errors raised by SQL a caller runs in a closure's transaction,
/// classified like the engine's own (`Busy`, `StorageFull`, ... or `Sqlite`), so that `?`
/// works inside `with_ownership`, `complete_with` and `transaction` closures.
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::sqlite("caller transaction", e)
    }
}

/// Adds the statement name to a rusqlite result (`.sql(CLAIM_SELECT)?` for a [`Stmt`](crate::store::Stmt), or a name).
pub(crate) trait SqlContext<T> {
    fn sql(self, statement: impl Into<&'static str>) -> Result<T>;
}

impl<T> SqlContext<T> for rusqlite::Result<T> {
    fn sql(self, statement: impl Into<&'static str>) -> Result<T> {
        let statement = statement.into();
        self.map_err(|e| Error::sqlite(statement, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ffi;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    #[test]
    fn sqlite_codes_are_classified() {
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_BUSY)), Error::Busy { .. }));
        assert!(matches!(Error::sqlite("s", failure(517)), Error::Busy { .. })); // BUSY_SNAPSHOT
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_LOCKED)), Error::Busy { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_FULL)), Error::StorageFull { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_NOMEM)), Error::OutOfMemory { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_TOOBIG)), Error::TooBig { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_CORRUPT)), Error::Corrupt { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_NOTADB)), Error::NotADatabase { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_READONLY)), Error::ReadOnly { .. }));
        assert!(matches!(Error::sqlite("s", failure(ffi::SQLITE_IOERR)), Error::Sqlite { .. }));
        assert!(Error::sqlite("s", failure(ffi::SQLITE_BUSY)).is_retryable());
        assert!(!Error::sqlite("s", failure(ffi::SQLITE_FULL)).is_retryable());
    }
}
