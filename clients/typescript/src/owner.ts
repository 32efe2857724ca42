/** The owner identity a client takes its leases as, when none is given. */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';

/** How much of the host name goes into a generated owner, so that it always fits in 256 bytes. */
const MAX_HOST_BYTES = 64;

/**
 * `host:pid:random`: readable in `dlock_locks` (which host and process holds a key), and
 * unguessable thanks to 122 random bits, so that no one else renews or releases by accident.
 */
export function generateOwner(): string {
  let host = hostname() || 'unknown';
  while (Buffer.byteLength(host) > MAX_HOST_BYTES) host = host.slice(0, -1);
  return `${host}:${process.pid}:${randomUUID().replaceAll('-', '')}`;
}
