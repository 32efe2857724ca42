// The conformance runner of the TypeScript client (conformance/README.md).
//
//   DLOCK_CONFORMANCE_DSN=postgresql://postgres@127.0.0.1:5432/postgres node run.mjs [--strict] [--only a,b] [scenarios dir]
//
// It imports 'dlock-client' and 'pg' from the node_modules of the directory it runs from (the
// package as installed from its tarball).
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import pg from 'pg';

import { Failure, Scenario } from './scenario.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const suite = process.env.DLOCK_CONFORMANCE_SUITE ?? join(here, '..', '..');
const EDITION = `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
                 WHERE p.proname = 'dlock_acquire' AND l.lanname = 'c') THEN 'native' ELSE 'sql' END`;

async function capabilities(dsn, pgbouncerDsn) {
  const found = new Set();
  const admin = new pg.Client({ connectionString: dsn });
  await admin.connect();
  try {
    if ((await admin.query('SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user')).rows[0].rolsuper) found.add('admin');
    const preload = (await admin.query("SELECT current_setting('shared_preload_libraries') AS s")).rows[0].s;
    if (preload.split(',').map((s) => s.trim()).includes('dlock')) found.add('preload');
    const edition = process.env.DLOCK_EDITION || (await admin.query({ text: EDITION, rowMode: 'array' })).rows[0][0];
    if (pgbouncerDsn) found.add('pgbouncer');
    if (process.platform !== 'win32') found.add('sigstop');
    return [found, edition];
  } finally {
    await admin.end();
  }
}

function differences(edition) {
  const path = join(suite, 'editions', `${edition}.json`);
  if (!existsSync(path)) return new Map();
  return new Map(JSON.parse(readFileSync(path, 'utf8')).differences.map((d) => [d.scenario, d.why]));
}

const args = process.argv.slice(2);
const strict = args.includes('--strict');
const onlyAt = args.indexOf('--only');
const only = new Set(onlyAt >= 0 ? args[onlyAt + 1].split(',').filter(Boolean) : []);
const positional = args.filter((a, i) => !a.startsWith('--') && (onlyAt < 0 || i !== onlyAt + 1));
const scenarios = positional[0] ?? join(suite, 'scenarios');

const dsn = process.env.DLOCK_CONFORMANCE_DSN;
const pgbouncerDsn = process.env.DLOCK_CONFORMANCE_PGBOUNCER_DSN || null;
const [have, edition] = await capabilities(dsn, pgbouncerDsn);
const skippedByEdition = differences(edition);
const env = { dsn, pgbouncerDsn, runId: randomBytes(4).toString('hex'), capabilities: have, childCommand: [process.execPath, join(here, 'child.mjs')] };
console.log(`conformance: typescript, edition ${edition}, run ${env.runId}, has ${JSON.stringify([...have].sort())}`);

let passed = 0;
let failed = 0;
let skipped = 0;
for (const file of readdirSync(scenarios).filter((f) => f.endsWith('.json')).sort()) {
  const name = basename(file, '.json');
  if (only.size && !only.has(name)) continue;
  const spec = JSON.parse(readFileSync(join(scenarios, file), 'utf8'));
  const missing = (spec.needs ?? []).filter((n) => !have.has(n)).sort();
  if (skippedByEdition.has(name)) {
    console.log(`skip ${name}: a declared difference of the ${edition} edition: ${skippedByEdition.get(name)}`);
    skipped += 1;
    continue;
  }
  if (missing.length) {
    if (strict) {
      console.log(`FAIL ${name}: needs ${JSON.stringify(missing)}, which this run has not (--strict)`);
      failed += 1;
    } else {
      console.log(`skip ${name}: needs ${JSON.stringify(missing)}`);
      skipped += 1;
    }
    continue;
  }
  const started = performance.now();
  try {
    await new Scenario(name, spec, env).run();
  } catch (e) {
    if (!(e instanceof Failure)) throw e;
    console.log(`FAIL ${name}: ${e.message}`);
    failed += 1;
    continue;
  }
  console.log(`ok   ${name} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
  passed += 1;
}
console.log(`conformance: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
