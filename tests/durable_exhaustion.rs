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

#[test]
fn resolve_with_commits_the_reconcilers_record_with_the_decision_or_neither() {
    let q = temp_queue();
    q.transaction(|tx| Ok(tx.execute_batch("CREATE TABLE reconciled (job INTEGER, how TEXT)")?)).unwrap();
    let rows = || -> i64 {
        q.with_connection(|c| Ok(c.query_row("SELECT count(*) FROM reconciled", [], |r| r.get(0))?)).unwrap()
    };
    let mut unknown = Vec::new();
    for n in 0..2 {
        q.add(&format!("send {n}"));
        let c = q.take("w");
        q.mark_unknown(&c.token(), "timeout after send").unwrap();
        unknown.push(c.token());
    }
    // A failing record rolls the decision back.
    let failed = q.resolve_with(&unknown[0], Resolution::Complete, |tx| {
        tx.execute("INSERT INTO reconciled VALUES (?1, 'chat log')", [unknown[0].id.0])?;
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
            tx.execute("INSERT INTO reconciled VALUES (?1, 'chat log')", [unknown[0].id.0])?;
            q.enqueue_tx(tx, fenceq::NewJob::new("audit", b"resolved".to_vec()).key("audit:1"))
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
    q.advance(std::time::Duration::from_secs(5));
    q.operator("second").acknowledge(&c.token()).unwrap();
    assert_eq!(q.job(c.id()).unwrap().unwrap().decision.unwrap().by.as_deref(), Some("first"));
}
