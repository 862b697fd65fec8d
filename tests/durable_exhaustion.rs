//! Capability level 3, durable exhaustion: a job out of attempts is an unacknowledged terminal
//! record that keeps its token, found again by cursor pages after a restart, and prunable only
//! after an acknowledgement with that exact token. Unknown outcomes wait for a resolution.

mod common;

use common::*;
use fenceq::{ClaimToken, Cursor, Error, JobState, NewJob, Resolution, Retention};
use std::collections::BTreeSet;
use std::time::Duration;

const WEEK_AND_A_DAY: Duration = Duration::from_secs(8 * 24 * 3600);

fn exhaust_one(q: &TestQueue, payload: &str) -> ClaimToken {
    q.enqueue(NewJob::new("q", payload.as_bytes().to_vec()).max_attempts(1)).unwrap();
    let job = q.take("w");
    q.exhaust(&job.token(), &format!("{payload} failed")).unwrap();
    job.token()
}

#[test]
fn an_exhaustion_keeps_its_token_and_survives_a_restart() {
    let q = temp_queue();
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

#[test]
fn acknowledge_needs_the_exact_token_and_is_idempotent() {
    let q = temp_queue();
    let token = exhaust_one(&q, "a");
    let before = snapshot(&q.path());
    for stale in [
        ClaimToken { attempt: token.attempt + 1, ..token },
        ClaimToken { claim_id: fenceq::ClaimId("00000000-0000-4000-8000-000000000000".parse().unwrap()), ..token },
    ] {
        assert!(matches!(q.acknowledge(&stale), Err(Error::StaleIdentity { .. })));
    }
    assert!(matches!(q.acknowledge(&ClaimToken { id: fenceq::JobId(4242), ..token }), Err(Error::NotFound(_))));
    assert_eq!(snapshot(&q.path()), before, "stale acknowledgements changed nothing");
    q.acknowledge(&token).unwrap();
    q.advance(Duration::from_secs(5));
    q.acknowledge(&token).unwrap();
    assert_eq!(q.job(token.id).unwrap().unwrap().acknowledged_at, Some(T0), "the first acknowledgement counts");
    assert!(q.exhaustions(None, 10).unwrap().items.is_empty());
}

#[test]
fn only_acknowledged_exhaustions_are_pruned_and_unknowns_never() {
    let q = temp_queue();
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

#[test]
fn a_full_pass_of_pages_returns_every_exhaustion_once_while_others_are_acknowledged_and_added() {
    let q = temp_queue();
    let initial: Vec<ClaimToken> = (0..25).map(|i| exhaust_one(&q, &format!("j{i}"))).collect();
    let mut seen = Vec::new();
    let mut cursor: Option<Cursor> = None;
    let mut round = 0;
    loop {
        let page = q.exhaustions(cursor, 4).unwrap();
        seen.extend(page.items.iter().map(|e| e.token));
        // Meanwhile: acknowledge what this page returned, and add a new exhaustion.
        for item in &page.items {
            q.acknowledge(&item.token).unwrap();
        }
        exhaust_one(&q, &format!("new{round}"));
        round += 1;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(round < 100, "the pass ends");
    }
    let unique: BTreeSet<_> = seen.iter().map(|t| t.id).collect();
    assert_eq!(unique.len(), seen.len(), "no exhaustion returned twice");
    for token in &initial {
        assert!(seen.contains(token), "{token:?} missed");
    }
}

#[test]
fn acknowledging_a_middle_item_does_not_shift_the_cursor() {
    let q = temp_queue();
    let tokens: Vec<_> = (0..6).map(|i| exhaust_one(&q, &format!("{i}"))).collect();
    let first = q.exhaustions(None, 3).unwrap();
    assert_eq!(first.items.iter().map(|e| e.token).collect::<Vec<_>>(), tokens[..3]);
    q.acknowledge(&tokens[1]).unwrap();
    q.acknowledge(&tokens[4]).unwrap();
    let second = q.exhaustions(first.next, 3).unwrap();
    assert_eq!(second.items.iter().map(|e| e.token).collect::<Vec<_>>(), vec![tokens[3], tokens[5]]);
    assert_eq!(second.next, None);
}

#[test]
fn replay_sends_an_exhaustion_back_with_a_fresh_budget() {
    let q = temp_queue();
    let token = exhaust_one(&q, "a");
    q.acknowledge(&token).unwrap();
    q.replay(token.id).unwrap();
    let record = q.job(token.id).unwrap().unwrap();
    assert_eq!((record.state, record.attempt, record.acknowledged_at), (JobState::Pending, 0, None));
    let again = q.take("w");
    assert_eq!(again.id(), token.id);
    assert!(matches!(q.replay(token.id), Err(Error::InvalidState { state: JobState::Running, .. })));
}

#[test]
fn unknowns_are_paged_and_resolved_with_their_exact_token() {
    let q = temp_queue();
    let mut tokens = Vec::new();
    for i in 0..3 {
        q.enqueue(NewJob::new("q", format!("{i}").into_bytes()).max_attempts(1)).unwrap();
        let job = q.take("w");
        q.mark_unknown(&job.token(), "connection reset after send").unwrap();
        tokens.push(job.token());
    }
    let page = q.unknowns(None, 10).unwrap();
    assert_eq!(page.items.iter().map(|u| u.token).collect::<Vec<_>>(), tokens);
    assert_eq!(page.items[0].reason.as_deref(), Some("connection reset after send"));

    let stale = ClaimToken { attempt: 9, ..tokens[0] };
    assert!(matches!(q.resolve(&stale, Resolution::Completed), Err(Error::StaleIdentity { .. })));

    q.resolve(&tokens[0], Resolution::Completed).unwrap();
    q.resolve(&tokens[1], Resolution::Retry).unwrap();
    q.resolve(&tokens[2], Resolution::Exhaust).unwrap();
    assert_eq!(q.job(tokens[0].id).unwrap().unwrap().state, JobState::Completed);
    let retried = q.job(tokens[1].id).unwrap().unwrap();
    assert_eq!((retried.state, retried.max_attempts), (JobState::Pending, 2), "a retry grants an attempt");
    assert_eq!(q.exhaustions(None, 10).unwrap().items[0].token, tokens[2]);
    assert!(matches!(q.resolve(&tokens[0], Resolution::Retry), Err(Error::InvalidState { .. })));
    assert_eq!(q.take("w").id(), tokens[1].id);
}

#[test]
fn an_exhaustion_by_the_reaper_is_acknowledged_with_the_expired_claims_token() {
    let q = temp_queue();
    q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(1)).unwrap();
    let job = q.take("w");
    q.advance(LEASE);
    assert_eq!(q.reap().unwrap().exhausted, 1);
    let page = q.exhaustions(None, 10).unwrap();
    assert_eq!(page.items[0].token, job.token());
    q.acknowledge(&job.token()).unwrap();
}
