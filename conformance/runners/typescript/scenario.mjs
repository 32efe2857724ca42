// The interpreter of the conformance scenarios (conformance/README.md): values, expectations,
// the runner's own actions, and the client actions, which go to the adapter of dlock-client.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import * as adapter from './adapter.mjs';

/** How long one step may take before the scenario fails (never a measurement). */
const STEP_LIMIT = 60_000;
const OPERATORS = new Set(['$gt', '$ge', '$lt', '$le', '$ne', '$len', '$any']);
/** The error kinds of SQLSTATEs a `sql` step may expect. */
const SQLSTATE_KINDS = { '22023': 'InvalidArgument', '22004': 'InvalidArgument', '0A000': 'ModeConflict', '42501': 'PermissionDenied', '55006': 'HeldHere' };
/** `int8` as bigint in the runner's own queries, as the client gives fences. */
const types = {
  getTypeParser(oid, format) {
    if (oid === 20) return (v) => BigInt(v);
    return pg.types.getTypeParser(oid, format);
  },
};

/** A step did not do what the scenario says. */
export class Failure extends Error {}

class SqlError extends Error {
  constructor(error) {
    super(error.message);
    this.sqlstate = error.code;
  }
}

class ChildError extends Error {
  constructor(kind, sqlstate) {
    super(`${kind} (${sqlstate})`);
    this.kind = kind;
    this.sqlstate = sqlstate;
  }
}

const withLimit = (promise, ms, what) => {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failure(what)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
};

/** Numbers and bigints compare as numbers of either kind. */
function same(a, b) {
  if (typeof a === 'bigint' || typeof b === 'bigint') {
    try {
      return BigInt(a) === BigInt(b);
    } catch {
      return false;
    }
  }
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object') return JSON.stringify(a) === JSON.stringify(b);
  return a === b;
}

function compare(a, b) {
  if (typeof a === 'bigint' || typeof b === 'bigint') {
    const [x, y] = [BigInt(a), BigInt(b)];
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (typeof a !== typeof b || (typeof a !== 'number' && typeof a !== 'string')) throw new TypeError('incomparable');
  return a < b ? -1 : a > b ? 1 : 0;
}

const show = (value) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? `${v}n` : v));

export class Scenario {
  constructor(name, spec, env) {
    this.name = name;
    this.spec = spec;
    this.env = env;
    this.bindings = new Map();
    this.tasks = new Map();
    this.sessions = new Map();
    this.clients = [];
    this.pools = [];
    this.children = new Map();
    this.apps = 0;
  }

  // ---- values ---------------------------------------------------------------------------

  key(name) {
    return `conf/${this.env.runId}/${this.name}/${name}`;
  }

  resolve(value) {
    if (typeof value === 'string') {
      if (value.startsWith('$$')) return value.slice(1);
      if (value.startsWith('$')) {
        const [name, ...path] = value.slice(1).split('.');
        if (!this.bindings.has(name)) throw new Failure(`nothing is bound to ${JSON.stringify(name)}`);
        let bound = this.bindings.get(name);
        for (const part of path) bound = bound[part];
        return bound;
      }
      return value;
    }
    if (Array.isArray(value)) return value.map((v) => this.resolve(v));
    if (value !== null && typeof value === 'object') {
      const keys = Object.keys(value).sort().join(',');
      if (keys === 'key') return this.key(value.key);
      if (keys === 'raw') return value.raw;
      if (keys === 'repeat,times') return value.repeat.repeat(value.times);
      if (keys === 'count,sequence') return Array.from({ length: value.count }, (_, i) => this.key(`${value.sequence}${i}`));
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.resolve(v)]));
    }
    return value;
  }

  keyArg(value) {
    return typeof value === 'string' && !value.startsWith('$') ? this.key(value) : this.resolve(value);
  }

  keysArg(value) {
    return Array.isArray(value) ? value.map((v) => this.keyArg(v)) : this.resolve(value);
  }

  // ---- expectations ---------------------------------------------------------------------

  mismatch(expected, actual, where) {
    if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
      const keys = Object.keys(expected);
      if (keys.length > 0 && keys.every((k) => OPERATORS.has(k))) {
        for (const [op, operand] of Object.entries(expected)) {
          const want = this.resolve(operand);
          let ok;
          try {
            ok = {
              $gt: () => compare(actual, want) > 0,
              $ge: () => compare(actual, want) >= 0,
              $lt: () => compare(actual, want) < 0,
              $le: () => compare(actual, want) <= 0,
              $ne: () => !same(actual, want),
              $len: () => actual.length === want,
              $any: () => true,
            }[op]();
          } catch {
            ok = false;
          }
          if (!ok) return `${where}: expected ${op} ${show(want)}, got ${show(actual)}`;
        }
        return null;
      }
      if (!keys.some((k) => ['key', 'raw', 'repeat', 'sequence'].includes(k))) {
        if (actual === null || typeof actual !== 'object') return `${where}: expected an object like ${show(expected)}, got ${show(actual)}`;
        for (const [k, v] of Object.entries(expected)) {
          const problem = this.mismatch(v, actual[k] ?? null, `${where}.${k}`);
          if (problem) return problem;
        }
        return null;
      }
    }
    const want = this.resolve(expected);
    if (Array.isArray(want) && Array.isArray(actual) && want.length === actual.length) {
      for (let i = 0; i < want.length; i++) {
        const problem = this.mismatch(want[i], actual[i], `${where}[${i}]`);
        if (problem) return problem;
      }
      return null;
    }
    return same(want, actual) ? null : `${where}: expected ${show(want)}, got ${show(actual)}`;
  }

  check(step, outcome) {
    const expect = step.expect ?? {};
    if (outcome.error && !('error' in expect)) {
      const [kind, sqlstate, message] = outcome.error;
      throw new Failure(`failed with ${kind} (SQLSTATE ${sqlstate}): ${message}`);
    }
    if ('error' in expect) {
      if (!outcome.error) throw new Failure(`expected ${expect.error}, but it succeeded`);
      const [kind, sqlstate, message] = outcome.error;
      if (kind !== expect.error) throw new Failure(`expected ${expect.error}, got ${kind} (SQLSTATE ${sqlstate}): ${message}`);
      if ('sqlstate' in expect && expect.sqlstate !== sqlstate) throw new Failure(`expected SQLSTATE ${expect.sqlstate}, got ${sqlstate}: ${message}`);
    }
    const fields = { ...outcome.result, elapsed_ms: outcome.elapsedMs };
    for (const [name, expected] of Object.entries(expect)) {
      if (name === 'error' || name === 'sqlstate') continue;
      const problem = this.mismatch(expected, fields[name] ?? null, name);
      if (problem) throw new Failure(problem);
    }
  }

  // ---- running --------------------------------------------------------------------------

  async run() {
    try {
      let index = 0;
      for (const step of this.spec.steps) {
        index += 1;
        try {
          await this.step(step);
        } catch (e) {
          if (e instanceof Failure) throw new Failure(`step ${index} (${step.do}): ${e.message}`);
          throw e;
        }
      }
    } finally {
      await this.cleanup();
    }
  }

  async step(step) {
    if ('background' in step) {
      const runs = Array.from({ length: step.count ?? 1 }, () => this.timed(step));
      for (const run of runs) run.catch(() => undefined);
      this.tasks.set(step.background, [step, runs]);
      return;
    }
    if (step.do === 'join') return this.join(step);
    const outcome = await withLimit(this.timed(step), STEP_LIMIT, `did not end within ${STEP_LIMIT} ms`);
    this.finish(step, outcome);
  }

  finish(step, outcome) {
    this.check(step, outcome);
    if ('as' in step && !outcome.error) this.bindings.set(step.as, outcome.result);
  }

  async join(step) {
    const [background, runs] = this.tasks.get(step.task);
    this.tasks.delete(step.task);
    const timeout = step.timeout_ms ?? 30_000;
    const outcomes = await withLimit(Promise.all(runs), timeout, `task ${JSON.stringify(step.task)} had not ended within ${timeout} ms`);
    for (const outcome of outcomes) {
      if (runs.length === 1) this.finish(background, outcome);
      else this.check(background, outcome);
    }
  }

  async timed(step) {
    const started = performance.now();
    const outcome = { result: {}, error: null, elapsedMs: 0 };
    try {
      outcome.result = (await this.perform(step)) ?? {};
    } catch (e) {
      if (e instanceof Failure) throw e;
      let kind;
      if (e instanceof ChildError) kind = [e.kind, e.sqlstate];
      else if (e instanceof SqlError) kind = [SQLSTATE_KINDS[e.sqlstate] ?? 'Server', e.sqlstate];
      else kind = adapter.classify(e) ?? ['Unexpected', null];
      outcome.error = [kind[0], kind[1] ?? null, `${e?.name}: ${e?.message}`];
    }
    outcome.elapsedMs = performance.now() - started;
    return outcome;
  }

  perform(step) {
    const action = this[`do_${step.do}`];
    if (typeof action !== 'function') throw new Failure(`unknown action ${JSON.stringify(step.do)}`);
    return action.call(this, step);
  }

  // ---- the runner's actions -------------------------------------------------------------

  appName(name) {
    this.apps += 1;
    return `conf-${this.env.runId}-${this.apps}-${name}`.slice(0, 63);
  }

  url(base, { role, app, offline } = {}) {
    const url = new URL(base);
    if (role) url.username = role;
    if (offline) {
      url.hostname = '127.0.0.1';
      url.port = '1';
    }
    if (app) url.searchParams.set('application_name', app);
    return url.toString();
  }

  async session(name) {
    name ??= 'admin';
    if (!this.sessions.has(name)) {
      if (name !== 'admin') throw new Failure(`no session ${JSON.stringify(name)}`);
      await this.open('admin', this.url(this.env.dsn, { app: this.appName('admin') }));
    }
    return this.sessions.get(name);
  }

  async open(name, url) {
    const session = new pg.Client({ connectionString: url });
    session.on('error', () => undefined);
    await session.connect();
    this.sessions.set(name, session);
  }

  async do_session(step) {
    await this.open(step.as, this.url(this.env.dsn, { role: step.role, app: this.appName(step.as) }));
  }

  async query(step) {
    const session = await this.session(step.session);
    const values = step.params === undefined ? undefined : this.resolve(step.params);
    try {
      return (await session.query({ text: step.query, values, rowMode: 'array', types })).rows;
    } catch (e) {
      throw new SqlError(e);
    }
  }

  async do_sql(step) {
    const rows = await this.query(step);
    return { value: rows[0]?.[0] ?? null, rows };
  }

  async do_wait_until(step) {
    const timeout = step.timeout_ms ?? 10_000;
    const deadline = performance.now() + timeout;
    for (;;) {
      const rows = await this.query(step);
      const value = rows[0]?.[0] ?? null;
      if (this.mismatch(step.value, value, 'value') === null) return { value };
      if (performance.now() >= deadline) throw new Failure(`the query never answered ${show(step.value)} within ${timeout} ms (last ${show(value)})`);
      await sleep(50);
    }
  }

  clientUrl(step, name) {
    const base = step.via === 'pgbouncer' ? this.env.pgbouncerDsn : this.env.dsn;
    if (!base) throw new Failure('no pgbouncer (DLOCK_CONFORMANCE_PGBOUNCER_DSN)');
    const app = this.appName(name);
    return [this.url(base, { role: step.role, app, offline: step.offline }), app];
  }

  async do_child_start(step) {
    const [url] = this.clientUrl(step, step.as);
    const child = new Child(this.env.childCommand, url, step.via === 'pgbouncer');
    this.children.set(step.as, child);
    await child.started;
    return { pid: child.pid };
  }

  async do_child_lock(step) {
    const fence = BigInt(await this.children.get(step.child).ask(`lock ${this.keyArg(step.key)} ${step.ttl_ms}`));
    return { fence, fences: [fence], term: fence };
  }

  do_child_signal(step) {
    process.kill(this.children.get(step.child).pid, step.signal === 'STOP' ? 'SIGSTOP' : 'SIGCONT');
  }

  async do_child_wait_lost(step) {
    return { value: (await this.children.get(step.child).ask(`wait_lost ${step.timeout_ms}`)) === 'true' };
  }

  async do_child_release(step) {
    return { value: (await this.children.get(step.child).ask('release')) === 'true' };
  }

  async do_child_quit(step) {
    const child = this.children.get(step.child);
    this.children.delete(step.child);
    await child.quit();
  }

  // ---- client actions -------------------------------------------------------------------

  async do_client(step) {
    const [url, app] = this.clientUrl(step, step.as);
    const owner = 'owner' in step ? this.resolve(step.owner) : undefined;
    const client = adapter.client(url, {
      pooler: step.via === 'pgbouncer' ? 'transaction' : 'session',
      driverPool: step.pool === 'driver',
      poolSize: step.pool_size ?? 4,
      owner,
      pools: this.pools,
    });
    this.clients.push(client);
    return { handle: client, app, owner: client.owner };
  }

  clientOf(step) {
    return this.bindings.get(step.client).handle;
  }

  leaseOf(step, name = 'lease') {
    return this.bindings.get(step[name]).handle;
  }

  async do_close(step) {
    await this.clientOf(step).close();
  }

  lockArgs(step) {
    return {
      key: this.keyArg(step.key),
      ttl: step.ttl_ms === undefined ? 30_000 : step.ttl_ms,
      wait: step.wait_ms === undefined ? 0 : step.wait_ms,
      mode: step.mode ?? 'exclusive',
      permits: step.permits,
      watchdog: step.watchdog ?? true,
      lockDelay: step.lock_delay_ms ?? 0,
    };
  }

  async do_lock(step) {
    return leaseResult(await adapter.lock(this.clientOf(step), this.lockArgs(step)));
  }

  async do_lock_all(step) {
    const lease = await this.clientOf(step).lockAll(this.keysArg(step.keys), {
      ttl: step.ttl_ms ?? 30_000,
      wait: step.wait_ms === undefined ? 0 : step.wait_ms,
    });
    return leaseResult(lease);
  }

  async do_with_lock(step) {
    await adapter.withLock(this.clientOf(step), this.lockArgs(step), async (lease) => {
      this.bindings.set(step.as, leaseResult(lease));
      for (const inner of step.steps) await this.step(inner);
    });
  }

  async do_release(step) {
    return { value: await this.leaseOf(step).release() };
  }

  async do_renew(step) {
    await this.leaseOf(step).renew();
  }

  async do_holds(step) {
    return { value: await this.leaseOf(step).holds() };
  }

  do_is_held(step) {
    return { value: this.leaseOf(step).isHeld };
  }

  async do_wait_lost(step) {
    return { value: await adapter.waitLost(this.leaseOf(step).lost, step.timeout_ms) };
  }

  async do_campaign(step) {
    const election = this.clientOf(step).election(this.keyArg(step.election), { ttl: step.ttl_ms ?? 30_000, wait: step.wait_ms ?? null });
    return leaseResult(await election.campaign(this.resolve(step.info)));
  }

  async do_resign(step) {
    return { value: await this.leaseOf(step).resign() };
  }

  async do_leader(step) {
    return { value: adapter.leader(await this.clientOf(step).election(this.keyArg(step.election)).leader()) };
  }

  do_observe(step) {
    return { handle: this.clientOf(step).election(this.keyArg(step.election)).observe() };
  }

  async do_observe_until(step) {
    const changes = this.bindings.get(step.observer).handle;
    const deadline = performance.now() + step.timeout_ms;
    const seen = [];
    for (;;) {
      const remaining = deadline - performance.now();
      if (remaining <= 0) throw new Failure(`no leader like ${show(step.leader)} within ${step.timeout_ms} ms; saw ${show(seen)}`);
      let leader;
      try {
        leader = adapter.leader(await changes.get(remaining));
      } catch (e) {
        if (e?.name === 'TimeoutError') continue;
        throw e;
      }
      seen.push(leader);
      const want = step.leader;
      if ((want === null && leader === null) || (want !== null && leader !== null && this.mismatch(want, leader, 'leader') === null)) return { value: leader };
    }
  }

  async do_stop_observing(step) {
    await this.bindings.get(step.observer).handle.close();
  }

  async do_wait_free(step) {
    return { value: await this.clientOf(step).waitFree(this.keyArg(step.key), step.timeout_ms ?? null) };
  }

  async do_force_release(step) {
    return { value: await this.clientOf(step).forceRelease(this.keyArg(step.key)) };
  }

  // ---- the end --------------------------------------------------------------------------

  async cleanup() {
    for (const child of this.children.values()) child.kill();
    for (const [, runs] of this.tasks.values()) await withLimit(Promise.allSettled(runs), STEP_LIMIT, 'cleanup').catch(() => undefined);
    for (const client of this.clients) await client.close().catch(() => undefined);
    for (const pool of this.pools) await pool.end().catch(() => undefined);
    for (const session of this.sessions.values()) await session.end().catch(() => undefined);
  }
}

function leaseResult(lease) {
  const fences = adapter.fences(lease);
  return { handle: lease, fence: fences[0], fences, term: fences[0] };
}

/** A child process of the runner's language, holding a lease (README: the child protocol). */
class Child {
  constructor(command, url, behindPgbouncer) {
    const env = { ...process.env, DLOCK_CONFORMANCE_CHILD_DSN: url };
    if (behindPgbouncer) env.DLOCK_CONFORMANCE_CHILD_POOLER = 'transaction';
    this.process = spawn(command[0], command.slice(1), { env, stdio: ['pipe', 'pipe', 'inherit'] });
    this.lines = [];
    this.waiting = null;
    createInterface({ input: this.process.stdout }).on('line', (line) => {
      this.lines.push(line);
      this.waiting?.();
    });
    this.started = this.next().then((hello) => {
      if (!hello.startsWith('ready ')) throw new Failure(`the child said ${JSON.stringify(hello)} instead of ready`);
      this.pid = Number(hello.split(' ')[1]);
    });
  }

  async next(timeout = 30_000) {
    const deadline = performance.now() + timeout;
    while (this.lines.length === 0) {
      const remaining = deadline - performance.now();
      if (remaining <= 0) throw new Failure(`the child did not answer within ${timeout} ms`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, remaining);
        this.waiting = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    return this.lines.shift();
  }

  async ask(request) {
    this.process.stdin.write(`${request}\n`);
    const [status, value, sqlstate] = (await this.next()).split(' ');
    if (status === 'ok') return value;
    if (status === 'error') throw new ChildError(value, sqlstate === '-' ? null : sqlstate);
    throw new Failure(`the child answered ${JSON.stringify(status)} to ${JSON.stringify(request)}`);
  }

  async quit() {
    await this.ask('quit');
    if (this.process.exitCode === null) await new Promise((resolve) => this.process.once('exit', resolve));
  }

  kill() {
    if (this.process.exitCode === null) {
      this.process.kill('SIGCONT');
      this.process.kill('SIGKILL');
    }
  }
}
