//! What a guarded transition that changed nothing means, for every store: the store
//! reports only that no row matched; this module reads the row's identity and names the
//! reason, so that every store refuses with the same typed error.

use crate::error::{Error, LostReason, Result};
use crate::job::{ClaimToken, JobId, JobState};
use crate::store::{Identity, OwnedLease, Store, TokenAt};

/// `Ok(())` when the guarded transition changed the row, else `OwnershipLost` with why.
pub(crate) fn owned<S: Store>(tx: &S::Tx, token: &ClaimToken, now: i64, changed: bool) -> Result<()> {
    if changed {
        return Ok(());
    }
    Err(ownership_lost::<S>(tx, token, now)?)
}

/// What a guarded transition of the exact live claim that changed nothing found.
pub(crate) enum Miss {
    /// The token does not own its job: `OwnershipLost`, with why.
    Lost(Error),
    /// The row still holds the token's running claim: either its lease ended by `now`, or
    /// another transaction held the row and the guard skipped it rather than wait and judge
    /// the lease by an instant read before the wait (PostgreSQL's settles), possibly while
    /// that transaction renews the lease. The caller waits for the row
    /// ([`Store::owned_lease`]), reads the clock again and judges the lease of the version
    /// it holds ([`lease_after_the_row`]).
    Held,
}

/// [`owned`], telling a row that still holds the token's running claim ([`Miss::Held`])
/// from a lost token.
pub(crate) fn owned_or_held<S: Store>(
    tx: &S::Tx,
    token: &ClaimToken,
    now: i64,
    changed: bool,
) -> Result<std::result::Result<(), Miss>> {
    if changed {
        return Ok(Ok(()));
    }
    let current = S::identity(tx, token.id)?;
    if current.as_ref().is_some_and(|c| c.matches(token) && c.state == JobState::Running) {
        return Ok(Err(Miss::Held));
    }
    Ok(Err(Miss::Lost(Error::OwnershipLost { token: *token, reason: lost_reason(current, token, now) })))
}

/// The row of `token`'s running claim first (a server store waits for a transaction that
/// holds it, and keeps it locked until `tx` ends), then the instant the lease is judged by
/// (`clock`), so that a wait never passes a lease that ended during it. The lease and that
/// instant, or `OwnershipLost` with why.
pub(crate) fn lease_after_the_row<S: Store>(
    tx: &S::Tx,
    token: &ClaimToken,
    clock: impl FnOnce(&S::Tx) -> Result<i64>,
) -> Result<(OwnedLease, i64)> {
    let locked = S::owned_lease(tx, TokenAt { token, now: i64::MIN })?;
    let now = clock(tx)?;
    match locked.filter(|lease| lease.until > now) {
        Some(lease) => Ok((lease, now)),
        None => Err(ownership_lost::<S>(tx, token, now)?),
    }
}

/// `OwnershipLost` for `token`, with the reason its row gives at `now`.
pub(crate) fn ownership_lost<S: Store>(tx: &S::Tx, token: &ClaimToken, now: i64) -> Result<Error> {
    Ok(Error::OwnershipLost { token: *token, reason: lost_reason(S::identity(tx, token.id)?, token, now) })
}

/// Why `token` does not own its job, from the row's identity at `now`.
pub(crate) fn lost_reason(current: Option<Identity>, token: &ClaimToken, now: i64) -> LostReason {
    match current {
        None => LostReason::Missing,
        Some(current) if !current.matches(token) => LostReason::Superseded,
        Some(current) if current.state != JobState::Running => LostReason::NotRunning(current.state),
        Some(current) if current.lease_until.is_some_and(|l| l <= now) => LostReason::LeaseExpired,
        Some(_) => LostReason::Superseded,
    }
}

/// `Ok(())` when a transition guarded by the exact token and `expected` state changed the
/// row, else `NotFound`, `StaleIdentity`, `WaitExpired` or `InvalidState`.
pub(crate) fn identified<S: Store>(
    tx: &S::Tx,
    token: &ClaimToken,
    expected: JobState,
    now: i64,
    operation: &'static str,
    changed: bool,
) -> Result<()> {
    if changed {
        return Ok(());
    }
    Err(match S::identity(tx, token.id)? {
        None => Error::NotFound(token.id),
        Some(current) if !current.matches(token) => Error::StaleIdentity { token: *token },
        Some(Identity { state: JobState::Waiting, wait_until: Some(deadline), .. })
            if expected == JobState::Waiting && deadline <= now =>
        {
            Error::WaitExpired { id: token.id, deadline }
        }
        Some(current) => {
            Error::InvalidState { id: token.id, state: current.state, operation, expected: expected.as_str() }
        }
    })
}

/// `Ok(())` when an operator's transition of job `id` (guarded by its state) changed the
/// row, else `NotFound` or `InvalidState` (`expected` names the states it accepts).
pub(crate) fn by_id<S: Store>(
    tx: &S::Tx,
    id: JobId,
    operation: &'static str,
    expected: &'static str,
    changed: bool,
) -> Result<()> {
    if changed {
        return Ok(());
    }
    Err(match S::identity(tx, id)? {
        None => Error::NotFound(id),
        Some(current) => Error::InvalidState { id, state: current.state, operation, expected },
    })
}
