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

import pg from 'pg';
import { run as graphileRun, makeWorkerUtils, Logger } from 'graphile-worker';
import { PgBoss } from 'pg-boss';
import {
  CLEANUP_MS, Case, FILL_CHUNK, UsageError, bounded, chunks, counter, figureLine, listOf,
  parseCommandLine, payload, positive, rate, runCase, runMain, versionOf as versionFrom, workersOf,
} from '../common/case.js';

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

// How often the completion check asks the server, once every handler has run.
const CONFIRM_POLL_MS = 2;

function usage() {
  return 'usage: node peers.js --url URL [--jobs N] [--workers W] [--only graphile,pgboss] ' +
    `[--columns ${COLUMNS.join(',')}] [--timeout-secs S] [--schema PREFIX] [--settings]`;
}

function parseOptions(argv) {
  const values = parseCommandLine(argv, {
    usage: usage(),
    only: 'graphile,pgboss',
    columns: COLUMNS,
    own: {
      url: { type: 'string' },
      schema: { type: 'string', default: `peers_${process.pid}` },
    },
  });
  const url = values.url ?? process.env.FENCEQ_POSTGRES_URL;
  if (!url) throw new UsageError(`--url is required (or FENCEQ_POSTGRES_URL)\n${usage()}`);
  const only = listOf(values, 'only', Object.keys(PEERS));
  const columns = listOf(values, 'columns', COLUMNS);
  // Schema names go into SQL as quoted identifiers: plain ones only, with room for the suffix.
  if (!/^[a-z_][a-z0-9_]{0,47}$/.test(values.schema)) {
    throw new UsageError(`--schema ${values.schema}: 1..=48 of [a-z0-9_], not starting with a digit`);
  }
  return {
    url,
    jobs: positive(values, 'jobs'),
    workers: positive(values, 'workers'),
    only,
    columns,
    timeoutMs: positive(values, 'timeout-secs') * 1000,
    prefix: values.schema,
    settingsOnly: values.settings,
  };
}

/** A peer's version, from this directory's node_modules. */
function versionOf(module) {
  return versionFrom(import.meta.url, module);
}

function quote(ident) {
  return `"${ident.replaceAll('"', '""')}"`;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * One case (common/case.js's `Case`: its cleanups, deadline and failure channel) in its scratch
 * schema, with the admin connection to ask the server how far the peer has got.
 */
class SchemaCase extends Case {
  constructor(admin, schema, deadline) {
    super(deadline);
    this.admin = admin;
    this.schema = schema;
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
    if (handled.count !== jobs) throw new Error(`the handler saw ${handled.count} jobs for ${jobs} jobs`);
    return result;
  }
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
      current = new SchemaCase(admin, schema, Date.now() + options.timeoutMs);
      // After the case's own cleanups its schema is dropped; a failed drop fails even a good
      // case, as the server may hold a runner's leftovers.
      const figure = await runCase(
        current,
        (kase) => peer.run(column, options, kase),
        `${peer.name} ${column}`,
        dropCreated,
      );
      current = null;
      const line = { ...figureLine(peer, version, column, figure, options), ...server };
      process.stdout.write(`${JSON.stringify(line)}\n`);
    }
  }
}

/** On every way out: the running case's cleanups, every schema still there, the connection. */
async function teardown(warn) {
  const errors = [...((await current?.cleanup()) ?? [])];
  if (admin) errors.push(...(await dropCreated()));
  for (const error of errors) warn(error);
  if (admin) await bounded(admin.end(), 5_000, 'closing the admin connection').catch(() => {});
}

runMain(main, teardown);
