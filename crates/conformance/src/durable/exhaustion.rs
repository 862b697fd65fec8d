//! Exhaustion records and their exact acknowledgement, from `tests/durable_exhaustion.rs`:
//! a record keeps its token and survives a restart; acknowledgement needs that exact token
//! and is idempotent; only acknowledged exhaustions are pruned, unknown outcomes never;
//! a replay sends a record back with a fresh budget; unknown outcomes are paged and resolved
//! with their exact token, and `resolve_with` commits the reconciler's own write with the
//! decision or neither; the reaper's exhaustion keeps the expired claim's token.

use super::exhaust_one;
use crate::controls::forged_claim_id;
use crate::fixture::{Db, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{ClaimToken, Error, JobState, NewJob, Resolution, Retention};
use std::time::Duration;

const WEEK_AND_A_DAY: Duration = Duration::from_secs(8 * 24 * 3600);

pub(super) fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        an_exhaustion_keeps_its_token_and_survives_a_restart,
        acknowledge_needs_the_exact_token_and_is_idempotent,
        only_acknowledged_exhaustions_are_pruned_and_unknowns_never,
        replay_sends_an_exhaustion_back_with_a_fresh_budget,
        unknowns_are_paged_and_resolved_with_their_exact_token,
        an_exhaustion_by_the_reaper_is_acknowledged_with_the_expired_claims_token,
        resolve_with_commits_the_reconcilers_record_with_the_decision_or_neither,
    ]
}

fn an_exhaustion_keeps_its_token_and_survives_a_restart<H: Harness>(h: &H) {
    let q = Db::new(h);
    let token = exhaust_one(&q, "a");
    let reopened = q.reopen();
    let page = reopened.exhaustions(None, 10).unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next, None);
    let item = &page.items[0];
    assert_eq!(item.token, token);
    assert_eq!(item.payload, b"a");
    assert_eq!(item.reason.as_deref(), Some("a failed"));
    assert_eq!(item.at, T0);
}

fn acknowledge_needs_the_exact_token_and_is_idempotent<H: Harness>(h: &H) {
    let q = Db::new(h);
    let token = exhaust_one(&q, "a");
    let before = q.snapshot();
    for stale in
        [ClaimToken { attempt: token.attempt + 1, ..token }, ClaimToken { claim_id: forged_claim_id(), ..token }]
    {
        assert!(matches!(q.acknowledge(&stale), Err(Error::StaleIdentity { .. })));
    }
    assert!(matches!(q.acknowledge(&ClaimToken { id: fenceq::JobId(4242), ..token }), Err(Error::NotFound(_))));
    assert_eq!(q.snapshot(), before, "stale acknowledgements changed nothing");
    q.acknowledge(&token).unwrap();
    q.advance(Duration::from_secs(5));
    q.acknowledge(&token).unwrap();
    assert_eq!(q.job(token.id).unwrap().unwrap().acknowledged_at, Some(T0), "the first acknowledgement counts");
    assert!(q.exhaustions(None, 10).unwrap().items.is_empty());
}

fn only_acknowledged_exhaustions_are_pruned_and_unknowns_never<H: Harness>(h: &H) {
    let q = Db::new(h);
    let acked = exhaust_one(&q, "acked");
    let unacked = exhaust_one(&q, "unacked");
    q.add("u");
    let unknown = q.take("w");
    q.mark_unknown(&unknown.token(), "timeout after send").unwrap();
    q.acknowledge(&acked).unwrap();
    q.advance(WEEK_AND_A_DAY * 10);
    let report = q.prune(&Retention::default()).unwrap();
    assert_eq!((report.settled, report.acknowledged), (0, 1));
    assert!(q.job(acked.id).unwrap().is_none());
    assert_eq!(q.job(unacked.id).unwrap().unwrap().state, JobState::Exhausted);
    assert_eq!(q.job(unknown.id()).unwrap().unwrap().state, JobState::Unknown);
    assert_eq!(q.reap().unwrap().total(), 0, "unknown is never retried automatically");
}

fn replay_sends_an_exhaustion_back_with_a_fresh_budget<H: Harness>(h: &H) {
    let q = Db::new(h);
    let token = exhaust_one(&q, "a");
    q.acknowledge(&token).unwrap();
    q.replay(token.id).unwrap();
    let record = q.job(token.id).unwrap().unwrap();
    assert_eq!((record.state, record.attempt, record.acknowledged_at), (JobState::Pending, 0, None));
    let again = q.take("w");
    assert_eq!(again.id(), token.id);
    assert!(matches!(q.replay(token.id), Err(Error::InvalidState { state: JobState::Running, .. })));
}

fn unknowns_are_paged_and_resolved_with_their_exact_token<H: Harness>(h: &H) {
    let q = Db::new(h);
    let mut tokens = Vec::new();
    for i in 0..3 {
        q.enqueue(NewJob::new("q", format!("{i}").into_bytes()).max_attempts(1)).unwrap();
        let job = q.take("w");
        q.mark_unknown(&job.token(), "connection reset after send").unwrap();
        tokens.push(job.token());
    }
    let page = q.unknowns(None, 10).unwrap();
    assert_eq!(page.items.iter().map(|u| u.token).collect::<Vec<_>>(), tokens);
    assert_eq!(page.items[0].evidence.as_deref(), Some("connection reset after send"));

    let stale = ClaimToken { attempt: 9, ..tokens[0] };
    assert!(matches!(q.resolve(&stale, Resolution::Complete), Err(Error::StaleIdentity { .. })));

    q.resolve(&tokens[0], Resolution::Complete).unwrap();
    q.resolve(&tokens[1], Resolution::Retry).unwrap();
    q.resolve(&tokens[2], Resolution::Exhaust).unwrap();
    assert_eq!(q.job(tokens[0].id).unwrap().unwrap().state, JobState::Completed);
    let retried = q.job(tokens[1].id).unwrap().unwrap();
    assert_eq!((retried.state, retried.max_attempts), (JobState::Pending, 2), "a retry grants an attempt");
    assert_eq!(q.exhaustions(None, 10).unwrap().items[0].token, tokens[2]);
    assert!(matches!(q.resolve(&tokens[0], Resolution::Retry), Err(Error::InvalidState { .. })));
    assert_eq!(q.take("w").id(), tokens[1].id);
}

fn an_exhaustion_by_the_reaper_is_acknowledged_with_the_expired_claims_token<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap();
    let job = q.take("w");
    q.advance(LEASE);
    assert_eq!(q.reap().unwrap().exhausted, 1);
    let page = q.exhaustions(None, 10).unwrap();
    assert_eq!(page.items[0].token, job.token());
    q.acknowledge(&job.token()).unwrap();
}

/// The reconciler's record is a row of the harness's domain table `replies`.
fn resolve_with_commits_the_reconcilers_record_with_the_decision_or_neither<H: Harness>(h: &H) {
    let q = Db::new(h);
    q.create_replies();
    let rows = || q.replies().len();
    let mut unknown = Vec::new();
    for n in 0..2 {
        q.add(&format!("send {n}"));
        let c = q.take("w");
        q.mark_unknown(&c.token(), "timeout after send").unwrap();
        unknown.push(c.token());
    }
    let record = |tx: &_| H::insert_reply(tx, unknown[0].id.0, i64::from(unknown[0].attempt), "chat log");
    // A failing record rolls the decision back.
    let failed = q.resolve_with(&unknown[0], Resolution::Complete, |tx| {
        record(tx)?;
        Err::<(), _>(Error::domain("the chat log was unreadable"))
    });
    assert!(matches!(failed, Err(Error::Domain(_))));
    assert_eq!((q.job(unknown[0].id).unwrap().unwrap().state, rows()), (JobState::Unknown, 0));
    // A stale token: the closure never runs.
    let mut stale = unknown[0];
    stale.attempt += 1;
    let ran = std::cell::Cell::new(false);
    let refused = q.resolve_with(&stale, Resolution::Complete, |_| {
        ran.set(true);
        Ok(())
    });
    assert!(matches!(refused, Err(Error::StaleIdentity { .. })) && !ran.get(), "{refused:?}");
    // Both commit, with a follow-up job from the same transaction, and who decided.
    q.operator("reconciler")
        .note("found in the chat log")
        .resolve_with(&unknown[0], Resolution::Complete, |tx| {
            record(tx)?;
            q.enqueue_tx(tx, NewJob::new("audit", b"resolved".to_vec()).key("audit:1"))
        })
        .unwrap();
    let job = q.job(unknown[0].id).unwrap().unwrap();
    assert_eq!((job.state, rows()), (JobState::Completed, 1));
    let decision = job.decision.unwrap();
    assert_eq!(decision.action, "resolve complete");
    assert_eq!(decision.by.as_deref(), Some("reconciler"));
    assert_eq!(decision.note.as_deref(), Some("found in the chat log"));
    assert_eq!(decision.at, q.now_ms());
    assert!(q.find_by_key("audit", "audit:1").unwrap().is_some());
    // The plain methods record the decision without a name.
    q.resolve(&unknown[1], Resolution::Retry).unwrap();
    let decision = q.job(unknown[1].id).unwrap().unwrap().decision.unwrap();
    assert_eq!((decision.action.as_str(), decision.by), ("resolve retry", None));
    // Bad names and notes change nothing.
    q.add("x");
    let c = q.take("w");
    q.exhaust(&c.token(), "gave up").unwrap();
    let too_long = "n".repeat(4097);
    for operator in [q.operator(""), q.operator("a\0b"), q.operator("ok").note(too_long)] {
        assert!(matches!(operator.acknowledge(&c.token()), Err(Error::InvalidInput { .. })));
    }
    assert!(q.job(c.id()).unwrap().unwrap().acknowledged_at.is_none());
    // A repeated acknowledgement keeps the first decision.
    q.operator("first").acknowledge(&c.token()).unwrap();
    q.advance(Duration::from_secs(5));
    q.operator("second").acknowledge(&c.token()).unwrap();
    assert_eq!(q.job(c.id()).unwrap().unwrap().decision.unwrap().by.as_deref(), Some("first"));
}
