//! The batched claim and completion (`claim_rows`, `complete_rows`): each list is claimed
//! and completed as the statements one by one would, with every guard of theirs.

use super::statements::BATCH_ROWS;
use super::SqliteStore;
use crate::job::{ClaimId, ClaimToken, Claimed, JobId, JobState};
use crate::store::{ClaimRequest, NewRow, Store, TokenAt};
use rusqlite::Connection;

fn migrated() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    crate::store::sqlite::connection_init(&Default::default(), &Default::default())(&mut conn).unwrap();
    crate::store::sqlite::migrate::migrate(&mut conn, crate::store::sqlite::migrate::SCHEMA_VERSION).unwrap();
    conn
}

/// A job of queue "q": priority `priority`, due at `run_at`, in `group` if any.
fn enqueue(conn: &Connection, priority: i32, run_at: i64, group: Option<&str>) -> JobId {
    let row = NewRow { queue: "q", key: None, payload: b"x", priority, run_at, max_attempts: 5, created_at: 0, group };
    SqliteStore::enqueue(conn, &row).unwrap().unwrap()
}

fn claim(conn: &Connection, now: i64, limit: u32) -> Vec<Claimed> {
    SqliteStore::claim(conn, ClaimRequest { queue: "q", worker: "w", now, lease_until: now + 1000, limit })
        .unwrap()
        .jobs
}

fn state(conn: &Connection, id: JobId) -> JobState {
    SqliteStore::identity(conn, id).unwrap().unwrap().state
}

/// More jobs than one statement takes (a full piece and a padded one), of mixed priorities
/// and due times, some not due: the claim hands out the due ones in claim order, each with
/// its own fresh claim id, the next attempt and the lease, exactly as the rows now say.
#[test]
fn a_batched_claim_hands_out_due_jobs_in_claim_order_with_their_own_tokens() {
    let conn = migrated();
    let largest = BATCH_ROWS[BATCH_ROWS.len() - 1];
    let mut due = Vec::new();
    for i in 0..(largest as i64 + 30) {
        let (priority, run_at) = ((i % 3) as i32, 100 - i % 7);
        let id = enqueue(&conn, priority, run_at, None);
        due.push((-priority, run_at, id));
        enqueue(&conn, 5, 10_000, None); // not due at the claim
    }
    due.sort();
    let limit = largest as u32 + 10;
    let claimed = claim(&conn, 1_000, limit);
    let order: Vec<JobId> = claimed.iter().map(|c| c.token.id).collect();
    let expected: Vec<JobId> = due.iter().take(limit as usize).map(|&(_, _, id)| id).collect();
    assert_eq!(order, expected);
    let mut claim_ids: Vec<ClaimId> = claimed.iter().map(|c| c.token.claim_id).collect();
    claim_ids.sort();
    claim_ids.dedup();
    assert_eq!(claim_ids.len(), claimed.len(), "every claim has its own claim id");
    for c in &claimed {
        assert_eq!((c.token.attempt, c.lease_until, c.queue.as_str()), (1, 2_000, "q"));
        assert!(SqliteStore::owns(&conn, TokenAt { token: &c.token, now: 1_999 }).unwrap());
        assert!(!SqliteStore::owns(&conn, TokenAt { token: &c.token, now: 2_000 }).unwrap(), "the lease ends");
    }
    // The rest of the due jobs, and none of the others.
    assert_eq!(claim(&conn, 1_000, limit).len(), due.len() - limit as usize);
    assert!(claim(&conn, 1_000, limit).is_empty());
}

/// One batch with every kind of token a settle must refuse beside the owners: a repeat, a
/// stale claim id, an earlier attempt, a lease that ended, a job already completed. Only the
/// first listing of each owning token completes, and each refused row is left as it was.
#[test]
fn a_batched_completion_writes_only_where_the_exact_token_owns_a_live_lease() {
    let conn = migrated();
    let largest = BATCH_ROWS[BATCH_ROWS.len() - 1];
    for _ in 0..(largest + 20) {
        enqueue(&conn, 0, 0, None);
    }
    let first = claim(&conn, 10, 3); // leases end at 1,010
    let owners = claim(&conn, 500, largest as u32 + 10); // leases end at 1,500
    let expired = first[0].token;
    let ended = first[1].token;
    let done = first[2].token;
    assert!(SqliteStore::complete_if_owned(&conn, TokenAt { token: &done, now: 600 }).unwrap());
    // The expired lease's job is reclaimed by a later claim: its first token is stale.
    let again = claim(&conn, 1_200, 1);
    assert_eq!(again[0].token.id, expired.id, "the expired job is reclaimed first");
    let reclaim = again[0].token;
    // The reclaim's job and attempt with a stranger's claim id.
    let stale = ClaimToken { claim_id: ClaimId::generate_at(0), ..reclaim };
    let mut tokens: Vec<ClaimToken> = owners.iter().map(|c| c.token).collect();
    tokens.insert(3, expired);
    tokens.insert(7, tokens[2]); // a repeat
    tokens.push(stale);
    tokens.push(done);
    tokens.push(ended); // claimed at 10, lease ended at 1,010: not owned at 1,100
    let results = SqliteStore::complete_many_if_owned(&conn, &tokens, 1_100).unwrap();
    let owned: Vec<bool> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| owners.iter().any(|c| c.token == *t) && !tokens[..i].contains(t))
        .collect();
    assert_eq!(results, owned);
    for c in &owners {
        assert_eq!(state(&conn, c.token.id), JobState::Completed);
    }
    assert_eq!(state(&conn, reclaim.id), JobState::Running, "the stranger's token changed nothing");
    assert!(SqliteStore::owns(&conn, TokenAt { token: &reclaim, now: 1_100 }).unwrap());
    assert_eq!(state(&conn, ended.id), JobState::Running, "an ended lease is not completed");
    // A lease is live only before its end.
    assert_eq!(SqliteStore::complete_many_if_owned(&conn, &[reclaim, ended], 2_200).unwrap(), vec![false, false]);
    assert!(SqliteStore::complete_many_if_owned(&conn, &[ended, reclaim], 2_199).unwrap()[1]);
}

/// A batched completion hands each group it lets go to the group's next job, as a
/// completion one by one does, and leaves a group whose holder is still running held.
#[test]
fn a_batched_completion_hands_on_the_groups_it_lets_go() {
    let conn = migrated();
    let heads: Vec<JobId> = ["a", "b", "c"].iter().map(|g| enqueue(&conn, 0, 0, Some(g))).collect();
    let next: Vec<JobId> = ["a", "b", "c"].iter().map(|g| enqueue(&conn, 0, 0, Some(g))).collect();
    let plain = enqueue(&conn, 0, 0, None);
    let claimed = claim(&conn, 10, 10);
    let mut ids: Vec<JobId> = claimed.iter().map(|c| c.token.id).collect();
    ids.sort();
    assert_eq!(ids, vec![heads[0], heads[1], heads[2], plain], "the held jobs wait for their heads");
    let settle: Vec<ClaimToken> = claimed.iter().filter(|c| c.token.id != heads[2]).map(|c| c.token).collect();
    assert_eq!(SqliteStore::complete_many_if_owned(&conn, &settle, 20).unwrap(), vec![true; 3]);
    let mut now_due: Vec<JobId> = claim(&conn, 30, 10).iter().map(|c| c.token.id).collect();
    now_due.sort();
    assert_eq!(now_due, vec![next[0], next[1]], "group c is still held by its running head");
}
