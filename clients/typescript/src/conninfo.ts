/**
 * Taking `dlock_pooler` out of a connection string (`postgresql://db/app?dlock_pooler=transaction`):
 * it is the client's, not the driver's. The rest is left exactly as written.
 */

export const POOLER = 'dlock_pooler';
export type PoolerMode = 'session' | 'transaction';

/** `url` without `dlock_pooler`, and its value (the last one written) if any. */
export function splitPooler(url: string): [string, string | null] {
  const at = url.indexOf('?');
  if (at < 0) return [url, null];
  const kept: string[] = [];
  let value: string | null = null;
  for (const segment of url.slice(at + 1).split('&')) {
    const eq = segment.indexOf('=');
    if (eq >= 0 && decodeURIComponent(segment.slice(0, eq)) === POOLER) {
      value = decodeURIComponent(segment.slice(eq + 1));
    } else {
      kept.push(segment);
    }
  }
  const base = url.slice(0, at);
  return [kept.length ? `${base}?${kept.join('&')}` : base, value];
}

/** `session` or `transaction`; anything else is refused. */
export function poolerMode(value: string | null | undefined): PoolerMode {
  const mode = value ?? 'session';
  if (mode !== 'session' && mode !== 'transaction') {
    throw new RangeError(`dlock: dlock_pooler=${JSON.stringify(mode)}: expected session or transaction`);
  }
  return mode;
}
