#!/usr/bin/env node
// fenceq's PostgreSQL peers, measured the way `fenceq-bench --db postgres://...` measures
// fenceq: the same six columns, the same job count and payload size, on the same server, so
// that run.sh can put them side by side in one run.
//
//   node peers.js --url postgres://... [--jobs 20000] [--workers 4] [--only graphile,pgboss]
//                 [--columns enqueue_1_per_call,...] [--timeout-secs 600] [--schema peers_PID]
//   node peers.js --url postgres://... --settings    (the server's version and durability, one
//                                                     JSON line, then exit)
//
// Every case runs in a fresh schema of its own (`<prefix>_<peer>_<n>`), refused if it
// already exists, created before the case and dropped after it (also after an error, a
// timeout or a signal). Schemas this script did not create are never touched.
//
// Prints one JSON line per figure on stdout:
//   {"peer":..., "version":..., "column":..., "jobs_per_s":..., ...settings}
// Errors: one `error: ...` line on stderr and exit status 1 (2 for a usage error).

import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import pg from 'pg';
import { run as graphileRun, makeWorkerUtils, Logger } from 'graphile-worker';
import { PgBoss } from 'pg-boss';

const COLUMNS = [
  'enqueue_1_per_call',
  'batch_of_100',
  'process_w1',
  'process_wn',
  'end_to_end_w1',
  'end_to_end_wn',
];

const PEERS = {
  graphile: { name: 'graphile-worker', module: 'graphile-worker', run: graphileCase },
  pgboss: { name: 'pg-boss', module: 'pg-boss', run: pgbossCase },
};

// Jobs per call when filling the queue before a process case (not timed).
const FILL_CHUNK = 1000;
// How long stopping a runner or closing a pool may take before it counts as hung.
const CLEANUP_MS = 30_000;
// How often the completion check asks the server, once every handler has run.
const CONFIRM_POLL_MS = 2;

class UsageError extends Error {}

function usage() {
  return 'usage: node peers.js --url URL [--jobs N] [--workers W] [--only graphile,pgboss] ' +
    `[--columns ${COLUMNS.join(',')}] [--timeout-secs S] [--schema PREFIX] [--settings]`;
}

function parseOptions(argv) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        url: { type: 'string' },
        jobs: { type: 'string', default: '20000' },
        workers: { type: 'string', default: '4' },
        only: { type: 'string', default: 'graphile,pgboss' },
        columns: { type: 'string', default: COLUMNS.join(',') },
        'timeout-secs': { type: 'string', default: '600' },
        schema: { type: 'string', default: `peers_${process.pid}` },
        settings: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }));
  } catch (e) {
    throw new UsageError(`${e.message}\n${usage()}`);
  }
  if (values.help) {
    process.stdout.write(`${usage()}\n`);
    process.exit(0);
  }
  const url = values.url ?? process.env.FENCEQ_POSTGRES_URL;
  if (!url) throw new UsageError(`--url is required (or FENCEQ_POSTGRES_URL)\n${usage()}`);
  const positive = (name) => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < 1) throw new UsageError(`--${name} ${values[name]}: a positive integer`);
    return n;
  };
  const only = values.only.split(',').filter(Boolean);
  for (const peer of only) {
    if (!PEERS[peer]) throw new UsageError(`--only ${peer}: one of ${Object.keys(PEERS).join(', ')}`);
  }
  const columns = values.columns.split(',').filter(Boolean);
  for (const column of columns) {
    if (!COLUMNS.includes(column)) throw new UsageError(`--columns ${column}: one of ${COLUMNS.join(', ')}`);
  }
  // Schema names go into SQL as quoted identifiers: plain ones only, with room for the suffix.
  if (!/^[a-z_][a-z0-9_]{0,47}$/.test(values.schema)) {
    throw new UsageError(`--schema ${values.schema}: 1..=48 of [a-z0-9_], not starting with a digit`);
  }
  return {
    url,
    jobs: positive('jobs'),
    workers: positive('workers'),
    only,
    columns,
    timeoutMs: positive('timeout-secs') * 1000,
    prefix: values.schema,
    settingsOnly: values.settings,
  };
}

/** The same shape and size (about 100 bytes of JSON) as fenceq-bench's payload. */
function payload(i) {
  return { update_id: i, message: { chat: 4711, text: `hello from the benchmark, job ${String(i).padStart(10)}` } };
}

function versionOf(module) {
  const require = createRequire(import.meta.url);
  // The package's own package.json, found next to its entry point.
  let dir = require.resolve(module);
  for (;;) {
    const cut = dir.lastIndexOf('/node_modules/');
    const rest = dir.slice(cut + '/node_modules/'.length).split('/');
    const name = rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
    if (name === module) {
      const root = dir.slice(0, cut) + '/node_modules/' + module;
      return JSON.parse(readFileSync(`${root}/package.json`, 'utf8')).version;
    }
    dir = dir.slice(0, cut);
  }
}

function quote(ident) {
  return `"${ident.replaceAll('"', '""')}"`;
}

/** Rejects after `ms` with `what` in the message; `promise`'s own outcome otherwise. */
function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${Math.round(ms / 1000)} s`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * One case's resources and its failure channel: what to stop afterwards (newest first), a
 * deadline every wait checks, and a promise that rejects when a runner reports a fatal error
 * (raced against every wait, so such an error ends the case at once instead of at its timeout).
 */
class Case {
  constructor(admin, schema, deadline) {
    this.admin = admin;
    this.schema = schema;
    this.deadline = deadline;
    this.cleanups = [];
    this.aborted = false;
    this.failed = new Promise((_, reject) => {
      this.fail = (error) => reject(error instanceof Error ? error : new Error(String(error)));
    });
    // Nobody may be waiting when a failure comes in; the next wait sees it.
    this.failed.catch(() => {});
  }

  defer(what, cleanup) {
    this.cleanups.push({ what, cleanup });
  }

  /** Waits for `promise`, a runner's failure or the case's deadline, whichever comes first. */
  wait(promise, what) {
    const left = Math.max(1, this.deadline - Date.now());
    return bounded(Promise.race([promise, this.failed]), left, what);
  }

  /** Polls the server until `done(row)` holds for the row `sql` returns. */
  async until(sql, params, done, what) {
    for (;;) {
      const { rows } = await this.wait(this.admin.query(sql, params), what);
      if (done(rows[0])) return;
      if (Date.now() > this.deadline) throw new Error(`${what} did not happen before the case's timeout`);
      await sleep(CONFIRM_POLL_MS);
    }
  }

  /**
   * The end of a pool's run: feeds its jobs (`produce`, when the column has a producer), waits
   * until the handler has seen all `jobs` (`handled`, a `counter`; `whose` names them) and
   * until `doneSql` says the peer's table holds the last completion (`isDone` on its row),
   * then returns the rate since `started`. Throws when the handler saw another number of jobs.
   */
  async drained({ produce, handled, jobs, started, whose, doneSql, doneParams, isDone }) {
    if (produce) await produce();
    await this.wait(handled.all, `${whose} ${jobs} jobs`);
    await this.until(doneSql, doneParams, isDone, 'the last completion');
    const result = rate(jobs, started);
    if (handled.handled !== jobs) throw new Error(`the handler saw ${handled.handled} jobs for ${jobs} jobs`);
    return result;
  }

  async cleanup() {
    this.aborted = true;
    const errors = [];
    for (const { what, cleanup } of this.cleanups.reverse()) {
      try {
        await bounded(Promise.resolve().then(cleanup), CLEANUP_MS, what);
      } catch (e) {
        errors.push(`${what}: ${e.message}`);
      }
    }
    this.cleanups = [];
    return errors;
  }
}

/** Counts handler calls; `all` resolves once `target` jobs have been handled. */
function counter(target) {
  let resolve;
  const all = new Promise((r) => {
    resolve = r;
  });
  const c = {
    handled: 0,
    all,
    hit(n = 1) {
      c.handled += n;
      if (c.handled >= target) resolve();
    },
  };
  return c;
}

function chunks(jobs, size) {
  const out = [];
  for (let start = 0; start < jobs; start += size) {
    out.push(Array.from({ length: Math.min(size, jobs - start) }, (_, k) => start + k));
  }
  return out;
}

/** Jobs per second of `jobs` jobs done in the time since `started`. */
function rate(jobs, started) {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { jobsPerS: jobs / seconds, seconds };
}

function workersOf(column, options) {
  return column.endsWith('_w1') ? 1 : options.workers;
}

// ------------------------------------------------------------------------ graphile-worker

/** graphile-worker's log: warnings and errors to stderr; its per-job info lines dropped. */
function graphileLogger() {
  return new Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  });
}

/**
 * graphile-worker: jobs added through the worker utils (`addJob`, `addJobs`), worked by
 * `run()` with `concurrency` W and its batching options: a local queue of 500 jobs fetched
 * and locked per query, and completions batched (`completeJobBatchDelay: 0`, same for
 * failures). It deletes a job when it completes it, so the last completion is the moment
 * its jobs table is empty.
 */
async function graphileCase(column, options, kase) {
  const { url, jobs } = options;
  const schema = kase.schema;
  const logger = graphileLogger();
  const utils = await kase.wait(makeWorkerUtils({ connectionString: url, schema, logger }), 'connecting');
  kase.defer('releasing the worker utils', () => utils.release());
  await kase.wait(utils.migrate(), 'installing the schema');
  const spec = (i) => ({ identifier: 'noop', payload: payload(i) });

  const runner = async (workers, produce) => {
    const handled = counter(jobs);
    const started = process.hrtime.bigint();
    const running = await kase.wait(
      graphileRun({
        connectionString: url,
        schema,
        concurrency: workers,
        maxPoolSize: Math.max(10, workers + 2),
        noHandleSignals: true,
        logger,
        taskList: {
          noop: async () => {
            handled.hit();
          },
        },
        preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
      }),
      'starting the runner',
    );
    kase.defer('stopping the runner', () => running.stop());
    running.promise.catch((e) => kase.fail(new Error(`graphile-worker's runner failed: ${e.message}`)));
    return kase.drained({
      produce,
      handled,
      jobs,
      started,
      whose: "the runner's",
      doneSql: `SELECT count(*)::int AS left FROM ${quote(schema)}._private_jobs`,
      doneParams: [],
      isDone: (row) => row.left === 0,
    });
  };

  switch (column) {
    case 'enqueue_1_per_call': {
      const started = process.hrtime.bigint();
      for (let i = 0; i < jobs && !kase.aborted; i++) await kase.wait(utils.addJob('noop', payload(i)), 'addJob');
      return rate(jobs, started);
    }
    case 'batch_of_100': {
      const started = process.hrtime.bigint();
      for (const chunk of chunks(jobs, 100)) await kase.wait(utils.addJobs(chunk.map(spec)), 'addJobs');
      return rate(jobs, started);
    }
    case 'process_w1':
    case 'process_wn': {
      for (const chunk of chunks(jobs, FILL_CHUNK)) await kase.wait(utils.addJobs(chunk.map(spec)), 'filling');
      return runner(workersOf(column, options));
    }
    case 'end_to_end_w1':
    case 'end_to_end_wn':
      return runner(workersOf(column, options), async () => {
        for (let i = 0; i < jobs && !kase.aborted; i++) await kase.wait(utils.addJob('noop', payload(i)), 'addJob');
      });
    default:
      throw new Error(`unknown column ${column}`);
  }
}

// ------------------------------------------------------------------------------- pg-boss

/**
 * pg-boss: one queue as `createQueue` makes it by default (no `notify`: pg-boss's
 * LISTEN/NOTIFY wake-ups are opt-in, and a NOTIFY on every `send` slows the producer), jobs
 * added by `send` and `insert`, worked by `work()` with `batchSize` 100, `localConcurrency`
 * W, the shortest polling interval it allows (0.5 s) and `burstWhenBatchFull` (fetch again at
 * once while fetches come back full; without it every fetch of 100 waits out the polling
 * interval). It keeps completed jobs, so the last completion is the moment every job of the
 * queue is `completed`.
 */
async function pgbossCase(column, options, kase) {
  const { url, jobs } = options;
  const schema = kase.schema;
  const workers = workersOf(column, options);
  const queue = 'bench';
  const boss = new PgBoss({
    connectionString: url,
    schema,
    max: Math.max(10, workers + 4),
    schedule: false,
  });
  boss.on('error', (e) => kase.fail(new Error(`pg-boss reported an error: ${e.message}`)));
  boss.on('warning', (w) => process.stderr.write(`pg-boss warning: ${w?.message ?? JSON.stringify(w)}\n`));
  await kase.wait(boss.start(), 'starting pg-boss (installing the schema)');
  kase.defer('stopping pg-boss', () => boss.stop({ graceful: true, close: true, timeout: CLEANUP_MS }));
  await kase.wait(boss.createQueue(queue), 'creating the queue');

  const worker = async (produce) => {
    const handled = counter(jobs);
    const started = process.hrtime.bigint();
    await kase.wait(
      boss.work(
        queue,
        { batchSize: 100, localConcurrency: workers, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
        async (batch) => {
          handled.hit(batch.length);
        },
      ),
      'starting the workers',
    );
    return kase.drained({
      produce,
      handled,
      jobs,
      started,
      whose: "the workers'",
      doneSql: `SELECT count(*) FILTER (WHERE state = 'completed')::int AS done FROM ${quote(schema)}.job WHERE name = $1`,
      doneParams: [queue],
      isDone: (row) => row.done >= jobs,
    });
  };

  switch (column) {
    case 'enqueue_1_per_call': {
      const started = process.hrtime.bigint();
      for (let i = 0; i < jobs && !kase.aborted; i++) await kase.wait(boss.send(queue, payload(i)), 'send');
      return rate(jobs, started);
    }
    case 'batch_of_100': {
      const started = process.hrtime.bigint();
      for (const chunk of chunks(jobs, 100)) {
        await kase.wait(boss.insert(queue, chunk.map((i) => ({ data: payload(i) }))), 'insert');
      }
      return rate(jobs, started);
    }
    case 'process_w1':
    case 'process_wn': {
      for (const chunk of chunks(jobs, FILL_CHUNK)) {
        await kase.wait(boss.insert(queue, chunk.map((i) => ({ data: payload(i) }))), 'filling');
      }
      return worker();
    }
    case 'end_to_end_w1':
    case 'end_to_end_wn':
      return worker(async () => {
        for (let i = 0; i < jobs && !kase.aborted; i++) await kase.wait(boss.send(queue, payload(i)), 'send');
      });
    default:
      throw new Error(`unknown column ${column}`);
  }
}

// ---------------------------------------------------------------------------------- main

/** Schemas this run created and has not dropped yet: the only ones it ever drops. */
const created = new Set();
let admin = null;
let current = null;

async function dropCreated() {
  const errors = [];
  for (const schema of [...created]) {
    try {
      await bounded(admin.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`), CLEANUP_MS, `dropping ${schema}`);
      created.delete(schema);
    } catch (e) {
      errors.push(`dropping the scratch schema ${schema}: ${e.message}`);
    }
  }
  return errors;
}

async function createSchema(schema) {
  const { rows } = await admin.query('SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1', [schema]);
  if (rows[0].n > 0) {
    throw new Error(`the scratch schema ${schema} already exists; drop it or give another --schema prefix`);
  }
  await admin.query(`CREATE SCHEMA ${quote(schema)}`);
  created.add(schema);
}

async function main() {
  const options = parseOptions(process.argv.slice(2));
  admin = new pg.Client({ connectionString: options.url, connectionTimeoutMillis: 10_000 });
  await bounded(admin.connect(), 15_000, 'connecting to the server');
  admin.on('error', (e) => current?.fail(new Error(`the admin connection: ${e.message}`)));
  const show = async (name) => (await admin.query(`SELECT current_setting('${name}') AS v`)).rows[0].v;
  const server = {
    server_version: await show('server_version'),
    fsync: await show('fsync'),
    synchronous_commit: await show('synchronous_commit'),
  };
  if (options.settingsOnly) {
    const versions = Object.fromEntries(Object.values(PEERS).map((p) => [p.name, versionOf(p.module)]));
    process.stdout.write(`${JSON.stringify({ ...server, node: process.version, ...versions })}\n`);
    return;
  }
  let n = 0;
  for (const key of options.only) {
    const peer = PEERS[key];
    const version = versionOf(peer.module);
    for (const column of options.columns) {
      const schema = `${options.prefix}_${key}_${n++}`;
      await createSchema(schema);
      current = new Case(admin, schema, Date.now() + options.timeoutMs);
      let figure;
      try {
        figure = await current.wait(peer.run(column, options, current), `${peer.name} ${column}`);
      } finally {
        const errors = await current.cleanup();
        errors.push(...(await dropCreated()));
        current = null;
        // A failed cleanup after a good figure is still a failed run: the server may hold a
        // runner's leftovers.
        if (errors.length > 0 && figure) throw new Error(errors.join('; '));
        for (const error of errors) process.stderr.write(`warning: ${error}\n`);
      }
      const line = {
        peer: peer.name,
        version,
        column,
        jobs_per_s: Math.round(figure.jobsPerS * 100) / 100,
        seconds: Math.round(figure.seconds * 1000) / 1000,
        jobs: options.jobs,
        workers: column.startsWith('process') || column.startsWith('end_to_end') ? workersOf(column, options) : null,
        ...server,
      };
      process.stdout.write(`${JSON.stringify(line)}\n`);
    }
  }
}

async function shutdown(code, message) {
  if (message) process.stderr.write(`error: ${message}\n`);
  try {
    const errors = [...((await current?.cleanup()) ?? [])];
    if (admin) errors.push(...(await dropCreated()));
    for (const error of errors) process.stderr.write(`warning: ${error}\n`);
    if (admin) await bounded(admin.end(), 5_000, 'closing the admin connection').catch(() => {});
  } finally {
    // Whatever a library left running (timers, pools), the run is over.
    process.exit(code);
  }
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => shutdown(130, `interrupted by ${signal}`));
}
process.on('unhandledRejection', (e) => shutdown(1, `unhandled rejection: ${e?.message ?? e}`));

main().then(
  () => shutdown(0),
  (e) => shutdown(e instanceof UsageError ? 2 : 1, e?.message ?? String(e)),
);
