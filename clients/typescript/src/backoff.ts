/**
 * Growing pauses between the tries of a wait that no notification can wake (behind a
 * transaction pooler), as the Rust client's `waiting/polling.rs`: from 10 ms, doubling up to the
 * client's maximum, each with a random half so that many clients' waiters spread out, and never
 * past the blocking lease's expiry, which the server tells. Milliseconds.
 */

/** The first pause after a busy answer. */
export const FIRST_PAUSE = 10;
/** The longest pause unless the client says otherwise. */
export const DEFAULT_MAX_POLL_INTERVAL = 250;

export class Backoff {
  private step = FIRST_PAUSE;
  private readonly max: number;

  constructor(maxInterval: number) {
    this.max = Math.max(maxInterval, FIRST_PAUSE);
  }

  /**
   * The next pause: between half the current step and all of it (`random` in [0, 1) picks
   * where), no later than `retryAfter` -- but never below the first pause, so that a key a
   * transaction keeps busy (`retryAfter` 0) is not hammered.
   */
  pause(retryAfter: number | null, random: number = Math.random()): number {
    const step = this.step;
    this.step = Math.min(step * 2, this.max);
    const r = Math.min(Math.max(random, 0), 1);
    const pause = step / 2 + (step / 2) * r;
    return retryAfter === null ? pause : Math.min(pause, Math.max(retryAfter, FIRST_PAUSE));
  }
}
