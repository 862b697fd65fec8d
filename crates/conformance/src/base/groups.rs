//! Groups, for every store: within one (queue, group) at most one job runs at any instant and
//! the group's jobs start in enqueue order whatever their priority; the group's next job waits
//! while the head is pending with a backoff, running, waiting, and (under the default policy)
//! `unknown` or exhausted and unacknowledged; completing, cancelling, acknowledging, resolving
//! and replaying release the group; the policy that lets a failed head go is stored per queue;
//! a reclaim after an expired lease takes the same head first; another handle obeys the same
//! holds; `groups` says why a group is blocked; bad group names change nothing.

use crate::fixture::{Db, HANG_GUARD, LEASE, T0};
use crate::harness::Harness;
use crate::Rule;
use fenceq::{
    BackoffScope, Claimed, Error, GroupBlock, GroupPolicy, JobId, JobState, NewJob, Outcome, Resolution, Retried,
    Snooze, WorkerPool,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every rule of groups.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        a_group_runs_one_job_at_a_time_in_enqueue_order_whatever_the_priority,
        jobs_without_a_group_and_other_groups_are_not_held,
        a_head_retrying_after_a_backoff_holds_its_group_and_runs_first,
        an_unknown_head_blocks_its_group_and_no_other_until_resolved,
        an_exhausted_head_blocks_until_acknowledged,
        a_replayed_head_runs_again_before_the_rest_of_its_group,
        a_parked_head_holds_its_group_until_it_settles,
        an_expired_lease_is_reclaimed_before_the_groups_next_job,
        the_reaper_exhausting_a_head_keeps_the_group_stopped,
        cancelling_a_held_job_keeps_the_order_and_cancelling_the_head_releases,
        the_continue_policy_lets_a_failed_head_go_and_is_stored_per_queue,
        under_continue_a_replayed_job_waits_behind_the_job_holding_the_group,
        another_handle_obeys_the_same_holds,
        a_batch_enqueue_holds_a_groups_later_jobs_in_order,
        a_batch_into_held_groups_and_a_batch_with_a_key_conflict_hold_as_one_row_at_a_time,
        groups_lists_each_group_with_its_head_and_why_it_is_blocked,
        bad_group_names_are_refused_and_change_nothing,
        a_pool_runs_each_groups_jobs_in_order_and_never_two_at_once,
        a_group_scoped_backoff_closes_the_group_and_no_other_spending_no_attempt,
        a_snooze_cap_exhaustion_stops_the_group_like_any_exhaustion,
    ]
}

fn add<H: Harness>(db: &Db<'_, H>, group: &str, payload: &str) -> JobId {
    db.enqueue(NewJob::new("q", payload.as_bytes().to_vec()).group(group)).unwrap().id()
}

fn payload(c: &Claimed) -> String {
    String::from_utf8(c.payload.clone()).unwrap()
}

/// Every claimable job of "q" right now (claimed, so held until settled).
fn claim_all<H: Harness>(db: &Db<'_, H>) -> Vec<Claimed> {
    db.claim_batch("q", "w", LEASE, 100).unwrap()
}

fn held<H: Harness>(db: &Db<'_, H>, id: JobId) -> bool {
    db.job(id).unwrap().expect("the job exists").held_by_group
}

fn a_group_runs_one_job_at_a_time_in_enqueue_order_whatever_the_priority<H: Harness>(h: &H) {
    let db = Db::new(h);
    let ids: Vec<JobId> = (0..4)
        .map(|n| {
            let job = NewJob::new("q", format!("m{n}").into_bytes()).group("chat:1").priority(n);
            db.enqueue(job).unwrap().id()
        })
        .collect();
    assert!(!held(&db, ids[0]), "the first job holds its group");
    assert!(ids[1..].iter().all(|id| held(&db, *id)), "the later jobs wait");
    let job = db.job(ids[3]).unwrap().unwrap();
    assert_eq!((job.group.as_deref(), job.state), (Some("chat:1"), JobState::Pending));
    for n in 0..4 {
        let claimed = claim_all(&db);
        assert_eq!(claimed.len(), 1, "one job of the group at a time (step {n})");
        assert_eq!(payload(&claimed[0]), format!("m{n}"), "enqueue order, not priority order");
        assert_eq!(claimed[0].group.as_deref(), Some("chat:1"));
        assert!(claim_all(&db).is_empty(), "nothing else of the group while it runs");
        db.complete(&claimed[0].token()).unwrap();
    }
    assert!(claim_all(&db).is_empty());
}

fn jobs_without_a_group_and_other_groups_are_not_held<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "a", "a1");
    add(&db, "a", "a2");
    add(&db, "b", "b1");
    db.add("plain 1");
    db.add("plain 2");
    let mut got: Vec<String> = claim_all(&db).iter().map(payload).collect();
    got.sort();
    assert_eq!(got, ["a1", "b1", "plain 1", "plain 2"], "one head per group, every job without one");
}

fn a_head_retrying_after_a_backoff_holds_its_group_and_runs_first<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "first");
    add(&db, "g", "second");
    let first = db.take("w");
    let retried = db.retry(&first.token(), Duration::from_secs(10), "429").unwrap();
    assert!(matches!(retried, Retried::Scheduled(_)), "{retried:?}");
    assert!(claim_all(&db).is_empty(), "the group waits for its head's backoff");
    let groups = db.groups(Some("q"), None, 10).unwrap();
    let due = groups[0].head.expect("the group has a head").run_at;
    assert_eq!(groups[0].blocked(due - 1), Some(GroupBlock::HeadDueAt(due)), "{groups:?}");
    assert_eq!(groups[0].blocked(due), None, "due at its instant");
    db.advance(Duration::from_secs(10));
    let again = claim_all(&db);
    assert_eq!(again.iter().map(payload).collect::<Vec<_>>(), ["first"], "the head again, first");
    assert_eq!(again[0].token.attempt, 2);
    db.complete(&again[0].token()).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["second"]);
}

fn an_unknown_head_blocks_its_group_and_no_other_until_resolved<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "sent?");
    add(&db, "g", "next");
    add(&db, "other", "other 1");
    add(&db, "other", "other 2");
    let claimed = claim_all(&db);
    let head = claimed.iter().find(|c| payload(c) == "sent?").unwrap();
    let other = claimed.iter().find(|c| payload(c) == "other 1").unwrap();
    db.mark_unknown(&head.token(), "timed out after sending").unwrap();
    db.complete(&other.token()).unwrap();
    let other = claim_all(&db);
    assert_eq!(other.iter().map(payload).collect::<Vec<_>>(), ["other 2"], "only the other group goes on");
    db.complete(&other[0].token()).unwrap();
    db.advance(Duration::from_secs(3600));
    assert!(claim_all(&db).is_empty(), "time does not release an unknown head");
    db.resolve(&head.token(), Resolution::Complete).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["next"], "resolving releases the group");
}

fn an_exhausted_head_blocks_until_acknowledged<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "bad");
    let next = add(&db, "g", "next");
    let head = db.take("w");
    db.exhaust(&head.token(), "permanent").unwrap();
    assert!(claim_all(&db).is_empty(), "an unacknowledged exhaustion stops its group");
    assert!(held(&db, next));
    db.acknowledge(&head.token()).unwrap();
    assert!(!held(&db, next), "acknowledging releases the group");
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["next"]);
}

fn a_replayed_head_runs_again_before_the_rest_of_its_group<H: Harness>(h: &H) {
    let db = Db::new(h);
    let bad = add(&db, "g", "bad");
    add(&db, "g", "next");
    let head = db.take("w");
    db.exhaust(&head.token(), "provider down").unwrap();
    db.replay(bad).unwrap();
    let again = claim_all(&db);
    assert_eq!(again.iter().map(payload).collect::<Vec<_>>(), ["bad"], "the replayed head first");
    assert!(claim_all(&db).is_empty());
    db.complete(&again[0].token()).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["next"]);
}

fn a_parked_head_holds_its_group_until_it_settles<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "approval");
    add(&db, "g", "next");
    let head = db.take("w");
    db.park(&head.token(), Duration::from_secs(60), "awaiting approval").unwrap();
    assert!(claim_all(&db).is_empty(), "a waiting head holds its group");
    let waiting = db.groups(None, None, 10).unwrap();
    assert!(matches!(waiting[0].blocked(0), Some(GroupBlock::HeadWaiting(_))), "{waiting:?}");
    db.resume(&head.token()).unwrap();
    let resumed = claim_all(&db);
    assert_eq!(resumed.iter().map(payload).collect::<Vec<_>>(), ["approval"], "the resumed head, not the next");
    db.complete(&resumed[0].token()).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["next"]);
}

fn an_expired_lease_is_reclaimed_before_the_groups_next_job<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "head");
    add(&db, "g", "next");
    let lost = db.take("crashed worker");
    db.advance(LEASE);
    let reclaimed = claim_all(&db);
    assert_eq!(reclaimed.iter().map(payload).collect::<Vec<_>>(), ["head"], "the same head, reclaimed first");
    assert_eq!(reclaimed[0].token.attempt, 2);
    assert!(db.complete(&lost.token()).is_err(), "the stale claim stays dead");
    db.complete(&reclaimed[0].token()).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["next"]);
}

fn the_reaper_exhausting_a_head_keeps_the_group_stopped<H: Harness>(h: &H) {
    let db = Db::new(h);
    let head = db.enqueue(NewJob::new("q", b"once".to_vec()).group("g").max_attempts(1)).unwrap().id();
    let next = add(&db, "g", "next");
    let claimed = db.take("w");
    db.advance(LEASE);
    assert_eq!(db.reap().unwrap().exhausted, 1);
    assert_eq!(db.job(head).unwrap().unwrap().state, JobState::Exhausted);
    assert!(held(&db, next), "an exhausted head stops its group, however it was exhausted");
    db.acknowledge(&claimed.token()).unwrap();
    assert!(!held(&db, next));
}

fn cancelling_a_held_job_keeps_the_order_and_cancelling_the_head_releases<H: Harness>(h: &H) {
    let db = Db::new(h);
    let head = add(&db, "g", "head");
    let middle = add(&db, "g", "middle");
    add(&db, "g", "last");
    assert_eq!(db.cancel(middle).unwrap(), JobState::Pending, "cancelled from pending");
    assert!(!held(&db, middle), "a cancelled job holds nothing and is held by nothing");
    assert_eq!(db.cancel(head).unwrap(), JobState::Pending);
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["last"], "the next live job, in order");
}

fn the_continue_policy_lets_a_failed_head_go_and_is_stored_per_queue<H: Harness>(h: &H) {
    let db = Db::new(h);
    assert_eq!(db.group_policy("q").unwrap(), GroupPolicy::StopOnFailure, "stop is the default");
    add(&db, "g", "unknown");
    add(&db, "g", "exhausted");
    add(&db, "g", "third");
    let first = db.take("w");
    db.mark_unknown(&first.token(), "timed out").unwrap();
    assert!(claim_all(&db).is_empty());
    db.set_group_policy("q", GroupPolicy::ContinueAfterFailure).unwrap();
    assert_eq!(db.reopen().group_policy("q").unwrap(), GroupPolicy::ContinueAfterFailure, "stored");
    assert_eq!(db.group_policy("other").unwrap(), GroupPolicy::StopOnFailure, "per queue");
    let second = claim_all(&db);
    assert_eq!(second.iter().map(payload).collect::<Vec<_>>(), ["exhausted"], "the change released the group");
    assert!(claim_all(&db).is_empty(), "still one at a time");
    db.exhaust(&second[0].token(), "permanent").unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["third"], "an exhaustion lets go too");
}

fn under_continue_a_replayed_job_waits_behind_the_job_holding_the_group<H: Harness>(h: &H) {
    let db = Db::new(h);
    db.set_group_policy("q", GroupPolicy::ContinueAfterFailure).unwrap();
    let failed = add(&db, "g", "failed");
    add(&db, "g", "holder");
    add(&db, "g", "last");
    let first = db.take("w");
    db.exhaust(&first.token(), "permanent").unwrap();
    let holder = claim_all(&db);
    assert_eq!(holder.iter().map(payload).collect::<Vec<_>>(), ["holder"]);
    db.replay(failed).unwrap();
    assert!(held(&db, failed), "a replayed job waits while another job holds its group");
    assert!(claim_all(&db).is_empty(), "never two of one group at once");
    db.complete(&holder[0].token()).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["failed"], "then the oldest first");
}

fn another_handle_obeys_the_same_holds<H: Harness>(h: &H) {
    let db = Db::new(h);
    let other = db.reopen();
    add(&db, "g", "first");
    let running = db.take("w");
    other.enqueue(NewJob::new("q", b"second".to_vec()).group("g")).unwrap();
    assert!(other.claim("q", "w2", LEASE).unwrap().is_none(), "the other handle sees the group held");
    db.complete(&running.token()).unwrap();
    let next = other.claim("q", "w2", LEASE).unwrap().expect("released for every handle");
    assert_eq!(payload(&next), "second");
}

fn a_batch_enqueue_holds_a_groups_later_jobs_in_order<H: Harness>(h: &H) {
    let db = Db::new(h);
    let jobs: Vec<NewJob> = (0..30)
        .map(|n| NewJob::new("q", format!("m{n:02}").into_bytes()).group(if n % 3 == 0 { "a" } else { "b" }))
        .collect();
    let ids: Vec<JobId> = db.enqueue_batch(jobs).unwrap().into_iter().map(|e| e.id()).collect();
    assert_eq!(ids.iter().filter(|id| !held(&db, **id)).count(), 2, "one holder per group");
    let mut order: Vec<String> = Vec::new();
    for _ in 0..30 {
        let claimed = claim_all(&db);
        assert!(!claimed.is_empty() && claimed.len() <= 2, "{claimed:?}");
        for c in &claimed {
            order.push(payload(c));
            db.complete(&c.token()).unwrap();
        }
        if order.len() == 30 {
            break;
        }
    }
    let of = |first: usize| {
        order.iter().filter(|p| p[1..].parse::<usize>().unwrap() % 3 == first).cloned().collect::<Vec<_>>()
    };
    let a: Vec<String> = of(0);
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!((a.len(), &a), (10, &sorted), "group a in enqueue order");
    let b: Vec<String> = order.iter().filter(|p| p[1..].parse::<usize>().unwrap() % 3 != 0).cloned().collect();
    let mut sorted = b.clone();
    sorted.sort();
    assert_eq!((b.len(), &b), (20, &sorted), "group b in enqueue order");
}

/// A batch's rows are held exactly as the same rows enqueued one at a time would be: behind a
/// job already holding their group, behind an earlier row of their group, and not at all
/// without a group; a batch with a key conflict (which a store may then insert row by row)
/// holds the same way, its duplicate naming the existing job.
fn a_batch_into_held_groups_and_a_batch_with_a_key_conflict_hold_as_one_row_at_a_time<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "g head");
    let running = db.take("w");
    let job = |payload: &str, group: Option<&str>| {
        let job = NewJob::new("q", payload.as_bytes().to_vec());
        match group {
            Some(group) => job.group(group),
            None => job,
        }
    };
    let batch = vec![
        job("g1", Some("g")),
        job("free", None),
        job("h0", Some("h")).key("dup"),
        job("h1", Some("h")),
        job("g2", Some("g")),
        NewJob::new("other", b"elsewhere".to_vec()).group("g"),
    ];
    let ids: Vec<JobId> = db.enqueue_batch(batch).unwrap().into_iter().map(|e| e.id()).collect();
    let holds: Vec<bool> = ids.iter().map(|id| held(&db, *id)).collect();
    assert_eq!(
        holds,
        [true, false, false, true, true, false],
        "g behind its running head, h behind h0; g of another queue is its own"
    );
    let conflicting = db.enqueue_batch(vec![job("h again", Some("h")).key("dup"), job("h2", Some("h"))]).unwrap();
    assert!(matches!(conflicting[0], fenceq::Enqueued::Duplicate(id) if id == ids[2]), "{conflicting:?}");
    assert!(matches!(conflicting[1], fenceq::Enqueued::New(_)), "{conflicting:?}");
    assert!(held(&db, conflicting[1].id()), "h2 waits behind h0 and h1");
    db.complete(&running.token()).unwrap();
    let order: Vec<String> = claim_all(&db).iter().map(payload).collect();
    assert_eq!(order, ["g1", "free", "h0"], "each group's first, and the job without a group");
}

fn groups_lists_each_group_with_its_head_and_why_it_is_blocked<H: Harness>(h: &H) {
    let db = Db::new(h);
    for group in ["a", "b", "c", "d"] {
        add(&db, group, &format!("{group}1"));
        add(&db, group, &format!("{group}2"));
    }
    db.add("no group");
    let claimed = claim_all(&db);
    let of = |p: &str| claimed.iter().find(|c| payload(c) == p).unwrap().token();
    db.mark_unknown(&of("a1"), "timeout").unwrap();
    db.exhaust(&of("b1"), "permanent").unwrap();
    db.complete(&of("d1")).unwrap();
    let all = db.groups(None, None, 10).unwrap();
    let summary: Vec<(String, u64, Option<GroupBlock>)> =
        all.iter().map(|g| (g.group.clone(), g.held, g.blocked(T0))).collect();
    assert_eq!(
        summary,
        [
            ("a".to_string(), 1, Some(GroupBlock::HeadUnknown)),
            ("b".to_string(), 1, Some(GroupBlock::HeadExhausted)),
            ("c".to_string(), 1, Some(GroupBlock::Running)),
            ("d".to_string(), 0, None),
        ]
    );
    assert!(all[0].is_blocked(T0) && all[1].is_blocked(T0) && !all[2].is_blocked(T0));
    // Cursor paging, in (queue, group) order.
    let first = db.groups(Some("q"), None, 2).unwrap();
    let rest = db.groups(Some("q"), Some(("q", &first[1].group)), 10).unwrap();
    let names: Vec<&str> = first.iter().chain(&rest).map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    assert!(db.groups(Some("other"), None, 10).unwrap().is_empty());
    assert!(matches!(db.groups(None, None, 0), Err(Error::InvalidInput { .. })));
}

fn bad_group_names_are_refused_and_change_nothing<H: Harness>(h: &H) {
    let db = Db::new(h);
    for bad in [String::new(), "x".repeat(513), "chat\0:1".to_string()] {
        let refused = db.enqueue(NewJob::new("q", b"x".to_vec()).group(bad.clone()));
        assert!(matches!(refused, Err(Error::InvalidInput { .. })), "{bad:?}: {refused:?}");
    }
    assert_eq!(db.count("pending"), 0, "nothing stored");
    assert!(db.enqueue(NewJob::new("q", b"x".to_vec()).group("x".repeat(512))).is_ok(), "512 bytes is allowed");
    assert!(matches!(db.set_group_policy("", GroupPolicy::StopOnFailure), Err(Error::InvalidInput { .. })));
    assert!(matches!(GroupPolicy::parse("sometimes"), Err(Error::InvalidInput { .. })));
}

/// A pool of several workers over several groups: each group's jobs start in enqueue order
/// and never overlap, recorded by the handlers themselves.
fn a_pool_runs_each_groups_jobs_in_order_and_never_two_at_once<H: Harness>(h: &H) {
    let db = Db::new(h);
    const GROUPS: usize = 4;
    const PER_GROUP: usize = 12;
    for n in 0..PER_GROUP {
        for g in 0..GROUPS {
            add(&db, &format!("chat:{g}"), &format!("{g}:{n}"));
        }
    }
    // Per group: the jobs started so far, and whether one is running now.
    type Seen = Vec<(Vec<usize>, bool)>;
    let seen: Arc<Mutex<Seen>> = Arc::new(Mutex::new(vec![(Vec::new(), false); GROUPS]));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let pool = {
        let seen = seen.clone();
        WorkerPool::builder(db.queue.clone(), "q").workers(4).handler(move |a| {
            let text = String::from_utf8(a.job().payload.clone()).unwrap();
            let (g, n) = text.split_once(':').unwrap();
            let (g, n): (usize, usize) = (g.parse().unwrap(), n.parse().unwrap());
            {
                let mut seen = seen.lock().unwrap();
                assert!(!seen[g].1, "two jobs of group {g} at once");
                seen[g].1 = true;
                seen[g].0.push(n);
            }
            std::thread::yield_now();
            seen.lock().unwrap()[g].1 = false;
            done_tx.send(()).unwrap();
            Outcome::Complete
        })
    }
    .start()
    .unwrap();
    for _ in 0..GROUPS * PER_GROUP {
        done_rx.recv_timeout(HANG_GUARD).expect("every job runs");
    }
    pool.shutdown(HANG_GUARD).unwrap();
    let seen = seen.lock().unwrap();
    for (g, (order, _)) in seen.iter().enumerate() {
        assert_eq!(order, &(0..PER_GROUP).collect::<Vec<_>>(), "group {g} in enqueue order, each once");
    }
}

/// A provider's "retry after" for one conversation: the head snoozes with the group's scope,
/// nothing of its group starts before the instant (in another handle either), other groups
/// go on, and no attempt is spent.
fn a_group_scoped_backoff_closes_the_group_and_no_other_spending_no_attempt<H: Harness>(h: &H) {
    let db = Db::new(h);
    let head = add(&db, "chat:1", "first");
    add(&db, "chat:1", "second");
    add(&db, "chat:2", "other");
    let claimed = claim_all(&db);
    let first = claimed.iter().find(|c| payload(c) == "first").unwrap();
    let other = claimed.iter().find(|c| payload(c) == "other").unwrap();
    let before = db.job(head).unwrap().unwrap();
    let snooze = Snooze::new(Duration::from_secs(3)).scope(BackoffScope::Group).reason("429: retry after 3");
    assert!(matches!(db.snooze(&first.token(), snooze).unwrap(), Retried::Scheduled(_)));
    db.complete(&other.token()).unwrap();
    add(&db, "chat:2", "other again");
    let elsewhere = db.reopen();
    assert_eq!(
        elsewhere.claim_batch("q", "w", LEASE, 10).unwrap().iter().map(payload).collect::<Vec<_>>(),
        ["other again"],
        "only the other group goes on"
    );
    db.advance(Duration::from_millis(2_999));
    assert!(claim_all(&db).is_empty(), "the group is closed until the instant");
    db.advance(Duration::from_millis(1));
    let again = claim_all(&db);
    assert_eq!(again.iter().map(payload).collect::<Vec<_>>(), ["first"], "the same head, first");
    let job = db.job(head).unwrap().unwrap();
    assert_eq!(
        job.max_attempts - job.attempt,
        before.max_attempts - before.attempt,
        "the snoozed attempt was given back: as many left as with the first claim running"
    );
    assert_eq!(job.snoozes, 1);
    db.complete(&again[0].token()).unwrap();
    assert_eq!(claim_all(&db).iter().map(payload).collect::<Vec<_>>(), ["second"]);
}

/// A head snoozed past its cap is exhausted, and stops its group until acknowledged.
fn a_snooze_cap_exhaustion_stops_the_group_like_any_exhaustion<H: Harness>(h: &H) {
    let db = Db::new(h);
    add(&db, "g", "snoozer");
    let next = add(&db, "g", "next");
    let first = db.take("w");
    assert!(matches!(
        db.snooze(&first.token(), Snooze::new(Duration::ZERO).max_snoozes(1)).unwrap(),
        Retried::Scheduled(_)
    ));
    let second = db.take("w");
    let capped = db.snooze(&second.token(), Snooze::new(Duration::ZERO).max_snoozes(1)).unwrap();
    assert_eq!(capped, Retried::Exhausted);
    assert!(held(&db, next), "the exhausted head stops its group");
    db.acknowledge(&second.token()).unwrap();
    assert!(!held(&db, next));
    db.set_group_policy("q", GroupPolicy::ContinueAfterFailure).unwrap();
    add(&db, "g2", "snoozer 2");
    let after = add(&db, "g2", "after");
    let third = claim_all(&db).into_iter().find(|c| payload(c) == "snoozer 2").unwrap();
    assert!(matches!(
        db.snooze(&third.token(), Snooze::new(Duration::ZERO).max_snoozes(0)).unwrap(),
        Retried::Exhausted
    ));
    assert!(!held(&db, after), "under continue, the cap's exhaustion lets the group go");
}
