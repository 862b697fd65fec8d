// What every peers.js here shares: the command line both take, the payload, the case and its
// cleanup, the timing, the JSON line of a figure, and the process's way out. Plain ES module,
// no npm dependencies (this directory has no node_modules of its own), imported as
// `../common/case.js`; each harness keeps what is its peers' own (their cases, their scratch
// space, their settings).

import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

// Jobs per call when filling the queue before a process case (not timed).
export const FILL_CHUNK = 1000;
// How long one cleanup (stopping a runner, the workers or a thread, closing a pool or a queue)
// may take before it counts as hung.
export const CLEANUP_MS = 30_000;

/** A bad command line: exit status 2 instead of 1. */
export class UsageError extends Error {}

/**
 * Parses `argv` with the options every harness takes (`--jobs`, `--workers`, `--only`,
 * `--columns`, `--timeout-secs`, `--settings`, `--help`) and the harness's `own` ones; strict,
 * so an unknown option is a usage error. `--help` prints `usage` and exits 0. Returns
 * parseArgs's `values`; the checks (`positive`, `listOf`) are the caller's, in its own order.
 */
export function parseCommandLine(argv, { usage, only, columns, own }) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        jobs: { type: 'string', default: '20000' },
        workers: { type: 'string', default: '4' },
        only: { type: 'string', default: only },
        columns: { type: 'string', default: columns.join(',') },
        'timeout-secs': { type: 'string', default: '600' },
        ...own,
        settings: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }));
  } catch (e) {
    throw new UsageError(`${e.message}\n${usage}`);
  }
  if (values.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  return values;
}

/** The option `name` of `values` as a positive integer; a usage error otherwise. */
export function positive(values, name) {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`--${name} ${values[name]}: a positive integer`);
  return n;
}

/** The comma-separated option `name` of `values`, every item one of `known`. */
export function listOf(values, name, known) {
  const items = values[name].split(',').filter(Boolean);
  for (const item of items) {
    if (!known.includes(item)) throw new UsageError(`--${name} ${item}: one of ${known.join(', ')}`);
  }
  return items;
}

/** The same shape and size (about 100 bytes of JSON) as fenceq-bench's payload. */
export function payload(i) {
  return { update_id: i, message: { chat: 4711, text: `hello from the benchmark, job ${String(i).padStart(10)}` } };
}

/**
 * The version of the package `module` as the harness at `base` (its `import.meta.url`) resolves
 * it: resolved from here, it would be looked for in node_modules above common/, where there is
 * none.
 */
export function versionOf(base, module) {
  const require = createRequire(base);
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

/** Rejects after `ms` with `what` in the message; `promise`'s own outcome otherwise. */
export function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${Math.round(ms / 1000)} s`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * One case's resources and its failure channel: what to stop afterwards (newest first), a
 * deadline every wait checks, and a promise that rejects when something the case started (a
 * runner, a worker, a producer thread) reports a fatal error (raced against every wait, so
 * such an error ends the case at once instead of at its timeout). Each harness extends it
 * with where its case lives (a schema, a file) and its own waits.
 */
export class Case {
  constructor(deadline) {
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

  /** Waits for `promise`, a failure or the case's deadline, whichever comes first. */
  wait(promise, what) {
    const left = Math.max(1, this.deadline - Date.now());
    return bounded(Promise.race([promise, this.failed]), left, what);
  }

  /** Runs every deferred cleanup, newest first, each bounded; returns their errors. */
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

/**
 * Runs `kase` (`run(kase)`, bounded by its deadline, `what` naming it), then its cleanups and
 * `release()` (what the harness made for the case: a schema, a file; its errors as strings),
 * also after an error. Returns the figure; cleanup errors are warnings on stderr, or the
 * error when the case itself succeeded.
 */
export async function runCase(kase, run, what, release) {
  let figure;
  try {
    figure = await kase.wait(run(kase), what);
  } finally {
    const errors = await kase.cleanup();
    errors.push(...(await release()));
    // A failed cleanup after a good figure is still a failed run: the scratch space may hold
    // a runner's leftovers.
    if (errors.length > 0 && figure) throw new Error(errors.join('; '));
    for (const error of errors) process.stderr.write(`warning: ${error}\n`);
  }
  return figure;
}

/** Counts handler calls (`hit(n)` for a batch of n); `all` resolves once `target` have been counted. */
export function counter(target) {
  let resolve;
  const all = new Promise((r) => {
    resolve = r;
  });
  const c = {
    count: 0,
    all,
    hit(n = 1) {
      c.count += n;
      if (c.count >= target) resolve();
    },
  };
  return c;
}

export function chunks(jobs, size) {
  const out = [];
  for (let start = 0; start < jobs; start += size) {
    out.push(Array.from({ length: Math.min(size, jobs - start) }, (_, k) => start + k));
  }
  return out;
}

/** Jobs per second of `jobs` jobs done in the time since `started`. */
export function rate(jobs, started) {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { jobsPerS: jobs / seconds, seconds };
}

/** Whether `column` runs workers (the process and end to end columns), not only a producer. */
export function isPool(column) {
  return column.startsWith('process') || column.startsWith('end_to_end');
}

export function workersOf(column, options) {
  return column.endsWith('_w1') ? 1 : options.workers;
}

/**
 * The fields every figure's JSON line starts with, in this order; each harness adds its
 * settings after them.
 */
export function figureLine(peer, version, column, figure, options) {
  return {
    peer: peer.name,
    version,
    column,
    jobs_per_s: Math.round(figure.jobsPerS * 100) / 100,
    seconds: Math.round(figure.seconds * 1000) / 1000,
    jobs: options.jobs,
    workers: isPool(column) ? workersOf(column, options) : null,
  };
}

/**
 * Runs `main` as the process: on its end, its error, SIGINT/SIGTERM or an unhandled rejection,
 * `teardown(warn)` (the harness's cleanup; `warn` prints a `warning:` line), then exit: 0
 * after `main`, 1 after an error (one `error:` line first), 2 after a UsageError, 130 after a
 * signal. The exit is forced: whatever a library left running (timers, pools, a thread), the
 * run is over.
 */
export function runMain(main, teardown) {
  const warn = (message) => process.stderr.write(`warning: ${message}\n`);
  const shutdown = async (code, message) => {
    if (message) process.stderr.write(`error: ${message}\n`);
    try {
      await teardown(warn);
    } finally {
      process.exit(code);
    }
  };
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => shutdown(130, `interrupted by ${signal}`));
  }
  process.on('unhandledRejection', (e) => shutdown(1, `unhandled rejection: ${e?.message ?? e}`));
  main().then(
    () => shutdown(0),
    (e) => shutdown(e instanceof UsageError ? 2 : 1, e?.message ?? String(e)),
  );
}
