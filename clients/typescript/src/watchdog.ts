/**
 * The watchdog of a TTL lease: a timer that renews it at its interval (a third of its ttl by
 * default) and declares it lost when a renewal is refused or the local deadline passes first,
 * even while a renewal is still on its way (a hung connection must not delay the news).
 */
import { isTransient } from './errors.js';
import type { Schedule } from './schedule.js';
import { now } from './waiting.js';

/** The longest a timer can be set for; a longer sleep wakes early and sleeps again. */
const MAX_TIMER = 2 ** 31 - 1;

/** What the watchdog needs of a lease. */
export interface Watched {
  readonly schedule: Schedule;
  readonly ended: boolean;
  readonly isLost: boolean;
  /** One renewal: the new expiry, or null if the lease is no longer ours. */
  renewTtl(): Promise<Date | null>;
  markLost(reason: string): void;
}

/** Starts watching `lease`; the returned function stops it (on release). */
export function startWatchdog(lease: Watched): () => void {
  const schedule = lease.schedule;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    clearTimeout(timer);
    if (lease.ended || lease.isLost) return;
    timer = setTimeout(tick, Math.min(Math.max(schedule.nextWake() - now(), 0), MAX_TIMER));
  };
  const tick = (): void => {
    if (lease.ended || lease.isLost) return;
    const due = schedule.due(now());
    if (due === 'lost') {
      lease.markLost('the ttl ran out before the lease was renewed');
      return;
    }
    arm(); // while renewing: wakes at the deadline, whatever the renewal does
    if (due === 'renew') void renew();
  };
  const renew = async (): Promise<void> => {
    const sent = now();
    let expiry: Date | null = null;
    let failure: unknown;
    try {
      expiry = await lease.renewTtl();
    } catch (e) {
      failure = e;
    }
    if (lease.ended || lease.isLost) return;
    if (failure === undefined && expiry !== null) {
      schedule.renewed(sent, now());
    } else if (failure !== undefined && isTransient(failure)) {
      // The connection may come back before the deadline: retry sooner.
      schedule.retrySoon(now());
    } else {
      lease.markLost(failure === undefined ? 'renewal answered that the lease is no longer ours' : `renewal failed: ${String(failure)}`);
      return;
    }
    arm();
  };
  arm();
  return () => clearTimeout(timer);
}
