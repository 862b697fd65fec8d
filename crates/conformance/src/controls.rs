//! The positive and stale-identity controls every level runs (so that no level can pass by refusing everything), one
//! rule per level, scenario and side:
//!
//! - `expiry`: a token whose lease is live to its last millisecond, and the same token once
//!   its lease has run out (nobody reclaimed it yet);
//! - `reclaim`: the new owner after another worker reclaimed an expired lease, and the old one;
//! - `reclaim_by_same_worker`: the same, with one worker id for both claims;
//! - `prune_then_same_key`: the owner of a job enqueued again under a key whose first job was
//!   completed and pruned, and the first job's token;
//! - `other_claim_id`: the real owner, and a token with its id and attempt but another claim id.
//!
//! The *live* side must be honoured by the level's operations, the *stale* side refused by
//! every one of them without changing a row. What the operations are is the level's:
//! settling for `base`; every token-taking call, domain writes included, for `fenced`;
//! exhaustion records and their exact acknowledgement for `durable`.

use crate::fixture::{Db, LEASE};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{ClaimId, ClaimToken, Error, JobState, LostReason, NewJob, Resolution, Retention};
use std::time::Duration;

/// The capability levels.
pub const BASE: u8 = 0;
/// See [`BASE`].
pub const FENCED: u8 = 1;
/// See [`BASE`].
pub const DURABLE: u8 = 2;

const SCENARIOS: [&str; 5] = ["expiry", "reclaim", "reclaim_by_same_worker", "prune_then_same_key", "other_claim_id"];

/// A scenario's outcome: the token under test and the job's live owner, if any.
struct Setup {
    token: ClaimToken,
    owner: Option<ClaimToken>,
    /// Why the stale token is refused.
    reason: LostReason,
}

/// A claim id no claim ever returned (claim ids are random v4 UUIDs).
pub fn forged_claim_id() -> ClaimId {
    ClaimId("00000000-0000-4000-8000-000000000000".parse().unwrap())
}

fn setup<H: Harness>(db: &Db<'_, H>, scenario: u8, live: bool) -> Setup {
    let reclaimed = |second_worker: &str| {
        db.add("x");
        let first = db.take("w");
        db.advance(LEASE);
        let second = db.take(second_worker);
        assert_eq!(second.token.id, first.token.id, "the expired lease was reclaimed");
        assert!(second.token.attempt > first.token.attempt && second.token.claim_id != first.token.claim_id);
        let token = if live { second.token } else { first.token };
        Setup { token, owner: Some(second.token), reason: LostReason::Superseded }
    };
    match scenario {
        0 => {
            db.add("x");
            let claimed = db.take("w");
            db.advance(if live { LEASE - Duration::from_millis(1) } else { LEASE });
            let owner = live.then_some(claimed.token);
            Setup { token: claimed.token, owner, reason: LostReason::LeaseExpired }
        }
        1 => reclaimed("w2"),
        2 => reclaimed("w"),
        3 => {
            let first = db.enqueue(NewJob::new("q", b"x".to_vec()).key("k")).unwrap().id();
            let old = db.take("w");
            db.complete(&old.token).unwrap();
            db.advance(Duration::from_secs(3600));
            assert_eq!(db.prune(&Retention::older_than(Duration::from_secs(60))).unwrap().settled, 1);
            let again = db.enqueue(NewJob::new("q", b"y".to_vec()).key("k")).unwrap();
            assert!(
                matches!(again, fenceq::Enqueued::New(_)) && again.id() != first,
                "a pruned key is a new job with a new id"
            );
            let new = db.take("w");
            let token = if live { new.token } else { old.token };
            Setup { token, owner: Some(new.token), reason: LostReason::Missing }
        }
        _ => {
            db.add("x");
            let claimed = db.take("w");
            let mut forged = claimed.token;
            forged.claim_id = forged_claim_id();
            let token = if live { claimed.token } else { forged };
            Setup { token, owner: Some(claimed.token), reason: LostReason::Superseded }
        }
    }
}

fn assert_lost(result: fenceq::Result<()>, reason: LostReason, what: &str) {
    match result {
        Err(Error::OwnershipLost { reason: got, .. }) => assert_eq!(got, reason, "{what}"),
        other => panic!("{what}: expected OwnershipLost ({reason}), got {other:?}"),
    }
}

/// One control: `LEVEL`'s operations against one side of one scenario.
fn control<H: Harness, const LEVEL: u8, const SCENARIO: u8, const LIVE: bool>(h: &H) {
    let db = Db::new(h);
    db.create_replies();
    let s = setup(&db, SCENARIO, LIVE);
    let token = s.token;
    match (LEVEL, LIVE) {
        (BASE, true) => {
            db.complete(&token).unwrap();
            assert_eq!(db.job(token.id).unwrap().unwrap().state, JobState::Completed);
        }
        (BASE, false) => {
            let before = db.snapshot();
            assert_lost(db.complete(&token), s.reason, "complete");
            assert_eq!(db.snapshot(), before, "a refused settle changed nothing");
        }
        (FENCED, true) => {
            assert!(db.owns(&token).unwrap());
            db.renew(&token, LEASE).unwrap();
            db.with_ownership(&token, |tx| H::insert_reply(tx, token.id.0, i64::from(token.attempt), "owned")).unwrap();
            db.complete_with(&token, |tx| H::insert_reply(tx, token.id.0, i64::from(token.attempt), "done")).unwrap();
            assert_eq!(db.job(token.id).unwrap().unwrap().state, JobState::Completed);
            let texts: Vec<String> = db.replies().into_iter().map(|r| r.2).collect();
            assert_eq!(texts, ["owned", "done"]);
        }
        (FENCED, false) => {
            let before = db.snapshot();
            assert!(!db.owns(&token).unwrap(), "owns says no");
            let reply = |tx: &_| H::insert_reply(tx, token.id.0, 0, "stale");
            assert_lost(db.renew(&token, LEASE).map(drop), s.reason, "renew");
            assert_lost(db.with_ownership(&token, reply), s.reason, "with_ownership");
            assert_lost(db.complete_with(&token, reply), s.reason, "complete_with");
            assert_lost(db.complete(&token), s.reason, "complete");
            assert_lost(db.retry(&token, Duration::ZERO, "e").map(drop), s.reason, "retry");
            assert_lost(db.exhaust(&token, "e"), s.reason, "exhaust");
            assert_lost(db.mark_unknown(&token, "e"), s.reason, "mark_unknown");
            assert_lost(db.park(&token, LEASE, "e"), s.reason, "park");
            assert_eq!(db.snapshot(), before, "refused calls changed nothing");
            assert!(db.replies().is_empty(), "no domain write of a stale token committed");
            if let Some(owner) = s.owner {
                assert!(db.owns(&owner).unwrap(), "the live owner is untouched");
            }
        }
        (_, true) => {
            db.exhaust(&token, "gave up").unwrap();
            let page = db.exhaustions(None, 10).unwrap();
            assert_eq!(page.items.len(), 1);
            assert_eq!(page.items[0].token, token, "the record keeps the exact token");
            db.acknowledge(&token).unwrap();
            db.acknowledge(&token).unwrap(); // idempotent for the same token
            assert!(db.exhaustions(None, 10).unwrap().items.is_empty());
            assert!(db.job(token.id).unwrap().unwrap().acknowledged_at.is_some());
        }
        (_, false) => {
            let before = db.snapshot();
            assert_lost(db.exhaust(&token, "e"), s.reason, "exhaust");
            assert_eq!(db.snapshot(), before, "a refused exhaustion changed nothing");
            let Some(owner) = s.owner else {
                assert!(db.exhaustions(None, 10).unwrap().items.is_empty());
                return;
            };
            // The owner's own exhaustion, then every call of the stale identity on it.
            db.exhaust(&owner, "gave up").unwrap();
            let before = db.snapshot();
            let stale = db.acknowledge(&token);
            assert!(matches!(stale, Err(Error::StaleIdentity { .. } | Error::NotFound(_))), "acknowledge: {stale:?}");
            let resolve = db.resolve(&token, Resolution::Complete);
            assert!(matches!(resolve, Err(Error::StaleIdentity { .. } | Error::NotFound(_))), "resolve: {resolve:?}");
            assert_eq!(db.snapshot(), before, "stale acknowledgements changed nothing");
            let page = db.exhaustions(None, 10).unwrap();
            assert_eq!(page.items.iter().map(|e| e.token).collect::<Vec<_>>(), [owner], "still unacknowledged");
            db.acknowledge(&owner).unwrap();
        }
    }
}

/// The controls of `LEVEL`: five scenarios, each with a live and a stale side.
pub fn rules<H: Harness, const LEVEL: u8>() -> Vec<Rule<H>> {
    let runs: [[fn(&H); 2]; 5] = [
        [control::<H, LEVEL, 0, true>, control::<H, LEVEL, 0, false>],
        [control::<H, LEVEL, 1, true>, control::<H, LEVEL, 1, false>],
        [control::<H, LEVEL, 2, true>, control::<H, LEVEL, 2, false>],
        [control::<H, LEVEL, 3, true>, control::<H, LEVEL, 3, false>],
        [control::<H, LEVEL, 4, true>, control::<H, LEVEL, 4, false>],
    ];
    let mut rules = Vec::new();
    for (scenario, [live, stale]) in SCENARIOS.iter().zip(runs) {
        rules.push(Rule { name: format!("control_{scenario}_live_token_is_honoured"), run: live });
        rules.push(Rule { name: format!("control_{scenario}_stale_token_is_refused"), run: stale });
    }
    rules
}
