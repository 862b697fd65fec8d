//! The full identity on `renew`, `owns` and every settle: a token with the right id and
//! attempt but another claim id is refused; every claim gets a claim id never seen before;
//! a replay or a pruned and re-enqueued key brings back an (id, attempt) pair but not the old
//! claim; a completed job stays completed whatever late write arrives; ids are never reused.
//! (From `tests/fenced_identity.rs`.)

use crate::controls::forged_claim_id;
use crate::fixture::{Db, LEASE};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{ClaimToken, Error, JobState, LostReason, NewJob, Resolution, Retention};
use std::time::Duration;

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_token_with_the_right_id_and_attempt_but_another_claim_id_is_rejected,
        every_claim_gets_a_claim_id_never_seen_before,
        a_settle_after_reclaim_is_rejected_and_the_new_owner_settles,
        completed_stays_completed_after_every_kind_of_late_write,
        a_replay_resets_the_attempt_counter_but_the_old_token_stays_dead,
        pruning_then_re_enqueueing_the_same_key_makes_a_new_job_that_old_tokens_cannot_touch,
        the_max_id_is_not_reused_after_it_is_pruned,
        no_kind_of_intake_reuses_the_ids_of_a_table_pruned_empty,
        an_older_job_pruned_after_the_newest_does_not_give_the_newest_id_again,
        tokens_of_pruned_rows_are_lost_with_reason_missing,
    ]
}

fn a_token_with_the_right_id_and_attempt_but_another_claim_id_is_rejected<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.add("x");
    let job = q.take("w");
    let mut other = job.token();
    other.claim_id = forged_claim_id();
    let before = q.snapshot();
    assert!(!q.owns(&other).unwrap());
    for result in [
        q.renew(&other, LEASE).map(|_| ()),
        q.complete(&other),
        q.exhaust(&other, "e"),
        q.mark_unknown(&other, "e"),
        q.park(&other, LEASE, "e"),
        q.retry(&other, Duration::ZERO, "e").map(|_| ()),
        q.with_ownership(&other, |_| Ok(())),
    ] {
        assert!(matches!(result, Err(Error::OwnershipLost { reason: LostReason::Superseded, .. })), "{result:?}");
    }
    assert_eq!(q.snapshot(), before, "rejected calls changed nothing");
    assert!(q.owns(&job.token()).unwrap(), "the real owner is untouched");
}

fn every_claim_gets_a_claim_id_never_seen_before<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(50)).unwrap();
    let mut seen = std::collections::HashSet::new();
    for attempt in 1..=50 {
        let job = q.take("w");
        assert_eq!(job.token.attempt, attempt);
        assert!(seen.insert(job.token.claim_id), "claim id reused");
        if attempt < 50 {
            q.retry(&job.token(), Duration::ZERO, "again").unwrap();
        }
    }
}

fn a_settle_after_reclaim_is_rejected_and_the_new_owner_settles<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.add("x");
    let old = q.take("w1");
    q.advance(LEASE);
    q.reap().unwrap();
    let new = q.take("w2");
    let before = q.snapshot();
    assert!(matches!(q.complete(&old.token()), Err(Error::OwnershipLost { .. })));
    assert!(matches!(q.renew(&old.token(), LEASE), Err(Error::OwnershipLost { .. })));
    assert_eq!(q.snapshot(), before);
    q.complete(&new.token()).unwrap();
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
}

fn completed_stays_completed_after_every_kind_of_late_write<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.enqueue(NewJob::new("q", b"x".to_vec()).key("k")).unwrap().id();
    let job = q.take("w");
    q.complete(&job.token()).unwrap();
    let before = q.snapshot();
    let t = job.token();
    let results = [
        q.complete(&t),
        q.retry(&t, Duration::ZERO, "late").map(|_| ()),
        q.exhaust(&t, "late"),
        q.mark_unknown(&t, "late"),
        q.park(&t, LEASE, "late"),
        q.renew(&t, LEASE).map(|_| ()),
        q.with_ownership(&t, |_| Ok(())),
        q.complete_with(&t, |_| Ok(())),
        q.resume(&t),
        q.acknowledge(&t),
        q.resolve(&t, Resolution::Retry),
        q.cancel(id).map(drop),
        q.replay(id),
    ];
    for result in results {
        assert!(result.is_err(), "a late write succeeded: {result:?}");
    }
    q.advance(LEASE * 10);
    assert_eq!(q.reap().unwrap().total(), 0);
    assert!(q.claim("q", "w", LEASE).unwrap().is_none());
    assert_eq!(q.enqueue(NewJob::new("q", b"again".to_vec()).key("k")).unwrap(), fenceq::Enqueued::Duplicate(id));
    assert_eq!(q.snapshot(), before);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Completed);
}

fn a_replay_resets_the_attempt_counter_but_the_old_token_stays_dead<H: Harness>(h: &H) {
    let q = Db::new(h);
    let id = q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap().id();
    let first = q.take("w");
    q.exhaust(&first.token(), "gave up").unwrap();
    q.replay(id).unwrap();
    let second = q.take("w");
    assert_eq!(second.token.attempt, first.token.attempt, "same (id, attempt) pair again");
    assert_ne!(second.token.claim_id, first.token.claim_id);
    let before = q.snapshot();
    assert!(matches!(q.complete(&first.token()), Err(Error::OwnershipLost { reason: LostReason::Superseded, .. })));
    assert!(matches!(q.acknowledge(&first.token()), Err(Error::StaleIdentity { .. })));
    assert_eq!(q.snapshot(), before);
    q.complete(&second.token()).unwrap();
}

fn pruning_then_re_enqueueing_the_same_key_makes_a_new_job_that_old_tokens_cannot_touch<H: Harness>(h: &H) {
    let q = Db::new(h);
    let old_id = q.enqueue(NewJob::new("q", b"v1".to_vec()).key("update:1")).unwrap().id();
    let old = q.take("w");
    q.complete(&old.token()).unwrap();
    q.advance(Duration::from_secs(8 * 24 * 3600));
    assert_eq!(q.prune(&Retention::default()).unwrap().settled, 1);
    let again = q.enqueue(NewJob::new("q", b"v2".to_vec()).key("update:1")).unwrap();
    assert!(!again.is_duplicate(), "the dedup horizon ends with the row");
    assert!(again.id() > old_id, "ids are never reused after pruning");
    let new = q.take("w");
    assert_eq!(new.token.attempt, 1);
    // The old token, or one rebuilt from the new id and the old attempt number, is rejected.
    for stale in [old.token(), ClaimToken { id: new.id(), ..old.token() }] {
        assert!(matches!(q.complete(&stale), Err(Error::OwnershipLost { .. })));
        assert!(!q.owns(&stale).unwrap());
    }
    q.complete(&new.token()).unwrap();
}

fn the_max_id_is_not_reused_after_it_is_pruned<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.add("a");
    let max = q.add("b");
    q.cancel(max).unwrap();
    q.advance(Duration::from_secs(8 * 24 * 3600));
    q.prune(&Retention::default()).unwrap();
    assert!(q.job(max).unwrap().is_none());
    assert!(q.add("c") > max);
}

/// Every row pruned, the newest included, between each kind of intake: one job, a batch (in
/// multi-row statements and row by row), a grouped job. Each new id is above every id handed
/// out before, and a batch's ids rise in its order.
fn no_kind_of_intake_reuses_the_ids_of_a_table_pruned_empty<H: Harness>(h: &H) {
    let q = Db::new(h);
    let prune_all = |ids: &[fenceq::JobId]| {
        for id in ids {
            q.cancel(*id).unwrap();
        }
        q.advance(Duration::from_secs(8 * 24 * 3600));
        assert_eq!(q.prune(&Retention::default()).unwrap().settled, ids.len() as u64);
        assert!(ids.iter().all(|id| q.job(*id).unwrap().is_none()));
    };
    let first = vec![q.add("a"), q.add("b")];
    prune_all(&first);
    let single = q.add("c");
    assert!(single > first[1], "{single:?} after {first:?}");
    prune_all(&[single]);
    let jobs: Vec<NewJob> = (0..157u8).map(|i| NewJob::new("q", vec![i])).collect();
    let batch: Vec<fenceq::JobId> = q.enqueue_batch(jobs).unwrap().iter().map(|e| e.id()).collect();
    assert!(batch[0] > single, "{:?} after {single:?}", batch[0]);
    assert!(batch.windows(2).all(|w| w[0] < w[1]), "{batch:?}");
    prune_all(&batch);
    let grouped = q.enqueue(NewJob::new("q", b"g".to_vec()).group("chat-1")).unwrap().id();
    assert!(grouped > batch[156], "{grouped:?} after {:?}", batch[156]);
}

/// The newest job pruned first, an older one later (a job settled later than a newer one):
/// the second prune deletes only a smaller id, and the newest job's id still never comes back.
fn an_older_job_pruned_after_the_newest_does_not_give_the_newest_id_again<H: Harness>(h: &H) {
    let q = Db::new(h);
    let older = q.add("a");
    let newest = q.add("b");
    q.cancel(newest).unwrap();
    q.advance(Duration::from_secs(8 * 24 * 3600));
    assert_eq!(q.prune(&Retention::default()).unwrap().settled, 1);
    q.cancel(older).unwrap();
    q.advance(Duration::from_secs(8 * 24 * 3600));
    assert_eq!(q.prune(&Retention::default()).unwrap().settled, 1);
    let next = q.add("c");
    assert!(next > newest, "{next:?} after {newest:?}");
}

fn tokens_of_pruned_rows_are_lost_with_reason_missing<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.add("x");
    let job = q.take("w");
    q.complete(&job.token()).unwrap();
    q.advance(Duration::from_secs(8 * 24 * 3600));
    q.prune(&Retention::default()).unwrap();
    assert!(matches!(q.complete(&job.token()), Err(Error::OwnershipLost { reason: LostReason::Missing, .. })));
    assert!(matches!(q.acknowledge(&job.token()), Err(Error::NotFound(_))));
}
