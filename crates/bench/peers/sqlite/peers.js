#!/usr/bin/env node
// fenceq's SQLite peer, measured the way `fenceq-bench` measures fenceq on SQLite: the same
// five columns, the same job count and payload, WAL and synchronous=NORMAL, scratch files on
// the same disk, so that run.sh can put them side by side in one run.
//
//   node peers.js [--jobs 20000] [--workers 4] [--only plainjob] [--columns enqueue_1_per_call,...]
//                 [--timeout-secs 600] [--dir SCRATCH_PARENT] [--poll-ms 50] [--producer thread]
//   node peers.js --settings    (SQLite's version, the pragmas plainjob leaves on its
//                                connection and the versions, one JSON line, then exit)
//
// Every case runs on a fresh database file of its own in a scratch directory this script
// creates (`mkdtemp` under --dir, the system's temporary directory without it); the files are
// removed after each case and the directory at the end, also after an error, a timeout or a
// signal. Nothing outside that directory is touched.
//
// Prints one JSON line per figure on stdout:
//   {"peer":..., "version":..., "column":..., "jobs_per_s":..., ...settings}
// Errors: one `error: ...` line on stderr and exit status 1 (2 for a usage error).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { better, defineQueue, defineWorker } from 'plainjob';
import {
  Case, FILL_CHUNK, UsageError, chunks, counter, figureLine, isPool, listOf, parseCommandLine,
  payload, positive, rate, runCase, runMain, versionOf as versionFrom, workersOf,
} from '../common/case.js';

const COLUMNS = ['enqueue_1_per_call', 'batch_of_100', 'process_w1', 'process_wn', 'end_to_end_wn'];

const PEERS = {
  plainjob: { name: 'plainjob', module: 'plainjob', run: plainjobCase },
};

// A producer loop gives the event loop a turn (signals, timers) once per this many calls.
const YIELD_EVERY = 1000;
// plainjob's job status values (its `JobStatus` enum: Pending 0, Processing 1, Done 2, Failed 3).
const DONE = 2;
// PRAGMA synchronous's values, by number.
const SYNCHRONOUS = ['OFF', 'NORMAL', 'FULL', 'EXTRA'];

function usage() {
  return 'usage: node peers.js [--jobs N] [--workers W] [--only plainjob] ' +
    `[--columns ${COLUMNS.join(',')}] [--timeout-secs S] [--dir DIR] [--poll-ms MS] ` +
    '[--producer thread|inline] [--settings]';
}

function parseOptions(argv) {
  const values = parseCommandLine(argv, {
    usage: usage(),
    only: 'plainjob',
    columns: COLUMNS,
    own: {
      dir: { type: 'string', default: tmpdir() },
      'poll-ms': { type: 'string', default: '50' },
      producer: { type: 'string', default: 'thread' },
    },
  });
  const only = listOf(values, 'only', Object.keys(PEERS));
  const columns = listOf(values, 'columns', COLUMNS);
  if (!['thread', 'inline'].includes(values.producer)) {
    throw new UsageError(`--producer ${values.producer}: thread or inline`);
  }
  return {
    jobs: positive(values, 'jobs'),
    workers: positive(values, 'workers'),
    only,
    columns,
    timeoutMs: positive(values, 'timeout-secs') * 1000,
    dir: values.dir,
    pollMs: positive(values, 'poll-ms'),
    producer: values.producer,
    settingsOnly: values.settings,
  };
}

/** A package's version, from this directory's node_modules. */
function versionOf(module) {
  return versionFrom(import.meta.url, module);
}

/** One turn of the event loop (timers, signals, other threads' messages). */
function yieldToEventLoop() {
  return new Promise((resolve) => setImmediate(resolve));
}

/** plainjob's log: warnings and errors to stderr; its per-job debug and info lines dropped. */
const quietLogger = {
  error: (message, ...meta) => process.stderr.write(`plainjob error: ${message} ${meta.join(' ')}\n`),
  warn: (message, ...meta) => process.stderr.write(`plainjob warning: ${message} ${meta.join(' ')}\n`),
  info: () => {},
  debug: () => {},
};

/**
 * A plainjob queue on a better-sqlite3 connection to `file`, and the settings its connection
 * ends up with: `defineQueue` itself sets `journal_mode = WAL`, `synchronous = 1` (NORMAL) and
 * `busy_timeout = 5000` on the connection it is given; nothing else is set here.
 */
function openQueue(file) {
  const db = new Database(file);
  let queue;
  try {
    queue = defineQueue({ connection: better(db), logger: quietLogger });
  } catch (e) {
    db.close();
    throw e;
  }
  const settings = {
    journal_mode: db.pragma('journal_mode', { simple: true }),
    synchronous: SYNCHRONOUS[db.pragma('synchronous', { simple: true })] ?? 'unknown',
    busy_timeout_ms: db.pragma('busy_timeout', { simple: true }),
    sqlite_version: db.prepare('SELECT sqlite_version()').pluck().get(),
  };
  if (settings.journal_mode !== 'wal' || settings.synchronous !== 'NORMAL') {
    queue.close();
    throw new Error(
      `plainjob left journal_mode=${settings.journal_mode} synchronous=${settings.synchronous} ` +
        'on its connection; the comparison needs WAL and NORMAL',
    );
  }
  return { db, queue, settings };
}

// --------------------------------------------------------------------- producer thread

/**
 * The end to end columns' producer (`--producer thread`): its own connection and plainjob
 * queue on the case's file, in a thread of its own, as fenceq-bench's producer is a thread
 * beside its pool. Posts `ready` (with its connection's settings), waits for `go`, adds one
 * job per call, posts `done`.
 */
function producerThread() {
  const { file, jobs, deadline } = workerData;
  const { queue, settings } = openQueue(file);
  parentPort.once('message', () => {
    try {
      for (let i = 0; i < jobs; i++) {
        queue.add('bench', payload(i));
        if (i % YIELD_EVERY === 0 && Date.now() > deadline) throw new Error('the producer ran past the case\'s timeout');
      }
      parentPort.postMessage({ type: 'done', added: jobs });
    } catch (e) {
      parentPort.postMessage({ type: 'error', message: e?.message ?? String(e) });
    } finally {
      queue.close();
    }
  });
  parentPort.postMessage({ type: 'ready', settings });
}

// ------------------------------------------------------------------------------- cases

/**
 * One case (common/case.js's `Case`: its cleanups, deadline and failure channel) on its
 * database file; `settings` is what plainjob left on the case's connection, for its line.
 */
class FileCase extends Case {
  constructor(file, deadline) {
    super(deadline);
    this.file = file;
    this.settings = null;
  }

  /**
   * Throws once the case is past its deadline. plainjob's workers chain their jobs through
   * promise continuations that never give timers a turn while jobs are waiting, so the
   * handler and the producer loops check the deadline themselves.
   */
  check() {
    if (this.aborted) throw new Error('the case was stopped');
    if (Date.now() > this.deadline) {
      const error = new Error('the case did not finish within its timeout');
      this.fail(error);
      throw error;
    }
  }
}

// ------------------------------------------------------------------------------ plainjob

/**
 * plainjob: one queue (`defineQueue`) on a better-sqlite3 connection to the case's file, jobs
 * of one type added by `add` (one INSERT in autocommit per call) and `addMany` (one
 * transaction per call), worked by W workers (`defineWorker`, each one job at a time: claim in
 * a `BEGIN IMMEDIATE` transaction, read the row, await the handler, mark it done), all on that
 * connection in this thread, with `pollIntervall` --poll-ms (how long a worker that found no
 * job sleeps). It keeps done jobs (status 2), so the last completion is the moment every row
 * of the table is done; `onCompleted` runs right after a job's row is marked done.
 */
async function plainjobCase(column, options, kase) {
  const { jobs } = options;
  const { db, queue, settings } = openQueue(kase.file);
  kase.defer('closing the queue', () => queue.close());
  kase.settings = settings;

  const statuses = () => {
    const rows = db.prepare('SELECT status, count(*) AS n FROM plainjob_jobs GROUP BY status').all();
    return Object.fromEntries(rows.map((r) => [r.status, r.n]));
  };
  /** The table holds `jobs` rows, every one of them in `status`. */
  const expect = (status, what) => {
    const seen = statuses();
    const total = Object.values(seen).reduce((a, b) => a + b, 0);
    if (total !== jobs || seen[status] !== jobs) {
      throw new Error(`${what}: the table holds ${JSON.stringify(seen)} (status: rows) for ${jobs} jobs`);
    }
  };

  const addOneByOne = async () => {
    for (let i = 0; i < jobs && !kase.aborted; i++) {
      queue.add('bench', payload(i));
      if (i % YIELD_EVERY === YIELD_EVERY - 1) {
        kase.check();
        await yieldToEventLoop();
      }
    }
  };

  /**
   * W workers started on the queue, `produce` feeding it meanwhile (when the column has a
   * producer): the rate from just before the workers start to the last completion, once
   * the handler ran once per job, none failed and the table says every job is done.
   */
  const workers = async (count, produce) => {
    const handled = counter(jobs);
    const completed = counter(jobs);
    let failed = 0;
    const running = [];
    const prepared = produce ? await produce.prepare() : null;
    const started = process.hrtime.bigint();
    for (let w = 0; w < count; w++) {
      const worker = defineWorker(
        'bench',
        async () => {
          handled.hit();
          if (handled.count % YIELD_EVERY === 0) kase.check();
        },
        {
          queue,
          pollIntervall: options.pollMs,
          logger: quietLogger,
          onCompleted: () => completed.hit(),
          onFailed: (job, error) => {
            failed += 1;
            kase.fail(new Error(`plainjob marked job ${job.id} failed: ${error.split('\n')[0]}`));
          },
        },
      );
      running.push({ worker, done: worker.start() });
      running.at(-1).done.catch((e) => kase.fail(new Error(`a plainjob worker failed: ${e?.message ?? e}`)));
    }
    const stop = async () => {
      await Promise.all(running.map(({ worker }) => worker.stop()));
      await Promise.all(running.map(({ done }) => done.catch(() => {})));
    };
    kase.defer('stopping the workers', stop);
    if (prepared) await kase.wait(prepared.go(), 'the producer');
    await kase.wait(completed.all, `the workers' ${jobs} jobs`);
    const result = rate(jobs, started);
    await kase.wait(stop(), 'stopping the workers');
    if (handled.count !== jobs || completed.count !== jobs || failed !== 0) {
      throw new Error(`the handler ran ${handled.count} times, ${completed.count} completed and ${failed} failed for ${jobs} jobs`);
    }
    expect(DONE, 'after the workers');
    return result;
  };

  /** The end to end columns' producer, prepared (connection open) before the clock starts. */
  const producer = () => ({
    async prepare() {
      if (options.producer === 'inline') return { go: addOneByOneYielding };
      const thread = new Worker(new URL(import.meta.url), {
        workerData: { file: kase.file, jobs, deadline: kase.deadline },
      });
      let exited = false;
      const messages = [];
      let waiting = null;
      thread.on('message', (m) => {
        if (m.type === 'error') kase.fail(new Error(`the producer thread: ${m.message}`));
        messages.push(m);
        waiting?.();
      });
      thread.on('error', (e) => kase.fail(new Error(`the producer thread: ${e.message}`)));
      thread.on('exit', (code) => {
        exited = true;
        if (code !== 0 && !kase.aborted) kase.fail(new Error(`the producer thread exited with status ${code}`));
      });
      kase.defer('stopping the producer thread', () => (exited ? undefined : thread.terminate()));
      const next = async (type) => {
        for (;;) {
          const at = messages.findIndex((m) => m.type === type);
          if (at >= 0) return messages.splice(at, 1)[0];
          await kase.wait(new Promise((r) => { waiting = r; }), `the producer thread's ${type}`);
        }
      };
      const ready = await next('ready');
      for (const key of ['journal_mode', 'synchronous']) {
        if (ready.settings[key] !== settings[key]) {
          throw new Error(`the producer's connection has ${key}=${ready.settings[key]}, the workers' ${settings[key]}`);
        }
      }
      return {
        async go() {
          thread.postMessage('go');
          await next('done');
        },
      };
    },
  });

  /** The inline producer: one `add` per call, then a turn of the event loop for the workers. */
  const addOneByOneYielding = async () => {
    for (let i = 0; i < jobs && !kase.aborted; i++) {
      queue.add('bench', payload(i));
      if (i % YIELD_EVERY === YIELD_EVERY - 1) kase.check();
      await yieldToEventLoop();
    }
  };

  switch (column) {
    case 'enqueue_1_per_call': {
      const started = process.hrtime.bigint();
      await kase.wait(addOneByOne(), 'add');
      const result = rate(jobs, started);
      expect(0, 'after add');
      return result;
    }
    case 'batch_of_100': {
      const started = process.hrtime.bigint();
      let calls = 0;
      for (const chunk of chunks(jobs, 100)) {
        if (kase.aborted) break;
        queue.addMany('bench', chunk.map(payload));
        if (++calls % (YIELD_EVERY / 100) === 0) {
          kase.check();
          await yieldToEventLoop();
        }
      }
      const result = rate(jobs, started);
      expect(0, 'after addMany');
      return result;
    }
    case 'process_w1':
    case 'process_wn': {
      for (const chunk of chunks(jobs, FILL_CHUNK)) queue.addMany('bench', chunk.map(payload));
      expect(0, 'after filling');
      return workers(workersOf(column, options));
    }
    case 'end_to_end_wn':
      return workers(workersOf(column, options), producer());
    default:
      throw new Error(`unknown column ${column}`);
  }
}

// ---------------------------------------------------------------------------------- main

/** The scratch directory this run created (removed at the end), and the case running now. */
let scratch = null;
let current = null;

function removeCaseFiles(file) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${file}${suffix}`, { force: true });
}

function removeScratch() {
  if (scratch) {
    rmSync(scratch, { recursive: true, force: true });
    scratch = null;
  }
}

async function settingsLine(options) {
  const file = join(scratch, 'settings.db');
  const { queue, settings } = openQueue(file);
  queue.close();
  removeCaseFiles(file);
  return {
    ...settings,
    poll_ms: options.pollMs,
    producer: options.producer,
    node: process.version,
    better_sqlite3: versionOf('better-sqlite3'),
    ...Object.fromEntries(Object.values(PEERS).map((p) => [p.name, versionOf(p.module)])),
  };
}

async function main() {
  const options = parseOptions(process.argv.slice(2));
  try {
    scratch = mkdtempSync(join(options.dir, 'fenceq-peers-sqlite-'));
  } catch (e) {
    throw new Error(`creating a scratch directory under ${options.dir}: ${e.message}`);
  }
  if (options.settingsOnly) {
    process.stdout.write(`${JSON.stringify(await settingsLine(options))}\n`);
    return;
  }
  const betterVersion = versionOf('better-sqlite3');
  let n = 0;
  for (const key of options.only) {
    const peer = PEERS[key];
    const version = versionOf(peer.module);
    for (const column of options.columns) {
      const file = join(scratch, `${key}_${n++}_${column}.db`);
      current = new FileCase(file, Date.now() + options.timeoutMs);
      // After the case's own cleanups its files are removed; a failed removal fails even a
      // good case.
      const figure = await runCase(
        current,
        (kase) => peer.run(column, options, kase),
        `${peer.name} ${column}`,
        async () => {
          try {
            removeCaseFiles(file);
            return [];
          } catch (e) {
            return [`removing ${file}: ${e.message}`];
          }
        },
      );
      const settings = current.settings;
      current = null;
      const line = {
        ...figureLine(peer, version, column, figure, options),
        poll_ms: isPool(column) ? options.pollMs : null,
        producer: column.startsWith('end_to_end') ? options.producer : null,
        journal_mode: settings.journal_mode,
        synchronous: settings.synchronous,
        sqlite_version: settings.sqlite_version,
        better_sqlite3: betterVersion,
        node: process.version,
      };
      process.stdout.write(`${JSON.stringify(line)}\n`);
    }
  }
}

/**
 * On every way out: the running case's cleanups, then the scratch directory (also when the
 * cleanups fail). Whatever a library left running (plainjob's maintenance timer, a thread),
 * runMain's exit ends it.
 */
async function teardown(warn) {
  try {
    const errors = [...((await current?.cleanup()) ?? [])];
    for (const error of errors) warn(error);
  } finally {
    try {
      removeScratch();
    } catch (e) {
      warn(`removing the scratch directory ${scratch}: ${e.message}`);
    }
  }
}

if (isMainThread) {
  // The last resort: a scratch directory left by an exit that skipped `teardown`.
  process.on('exit', () => {
    try {
      removeScratch();
    } catch {
      // Nothing more to do on the way out.
    }
  });
  runMain(main, teardown);
} else {
  producerThread();
}
