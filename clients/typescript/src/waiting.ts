/**
 * Waiting for a key without holding a pooled connection for the length of the wait, as the Rust
 * client's `waiting/`.
 *
 * The client keeps a local FIFO line per key; only its head talks to the server, in short calls:
 * it tries the key once (a try never queues on the server), and if the key is busy sleeps until
 * something says it may be free, then tries again. What wakes it:
 * - the listener (the default): one connection shared by every wait of the client, on which the
 *   server NOTIFYs when a watched key is freed; and the blocking lease's expiry, which the server
 *   tells in its answer. The head watches the key before it tries, so a release is either seen
 *   by the try or notified after it;
 * - nothing but time (behind a transaction pooler, where notifications cannot pass): growing,
 *   jittered pauses between tries, never past the blocking lease's expiry.
 *
 * Waiters here are not in the server's queue: waits on the server by other clients go first,
 * and between clients the first to try after a release wins; within one client, waiters of a
 * key are granted in arrival order.
 */
import { Backoff } from './backoff.js';
import type { Listener } from './listener.js';
import { type Busy, isBusy } from './model.js';
import type { Statements } from './sql.js';

/** How long a head sleeps at most when only a notification can free the key: a safety net (ms). */
export const RECHECK = 2000;
/** The longest a timer can be set for; longer sleeps wake early and sleep again. */
const MAX_TIMER = 2 ** 31 - 1;

export const now = (): number => performance.now();

/** Fired once, then replaced: what a sleeper of a line waits for. */
export class Signal {
  private readonly callbacks = new Set<() => void>();
  fired = false;

  fire(): void {
    this.fired = true;
    for (const callback of this.callbacks) callback();
    this.callbacks.clear();
  }

  /** Calls `callback` when fired; the returned function unsubscribes. */
  on(callback: () => void): () => void {
    if (this.fired) {
      callback();
      return () => undefined;
    }
    this.callbacks.add(callback);
    return () => this.callbacks.delete(callback);
  }
}

/** Resolves after `ms` milliseconds, or sooner when `wake` fires. */
export function sleep(ms: number, wake?: Signal): Promise<void> {
  return new Promise((resolve) => {
    let off = (): void => undefined;
    const timer = setTimeout(() => {
      off();
      resolve();
    }, Math.min(Math.max(ms, 0), MAX_TIMER));
    if (wake !== undefined) {
      off = wake.on(() => {
        clearTimeout(timer);
        resolve();
      });
    }
  });
}

/** A lock granted in arrival order, that can be given up at a deadline. */
class FifoTurn {
  private held = false;
  private readonly line: (() => void)[] = [];

  acquire(deadline: number | null): Promise<boolean> {
    if (!this.held && this.line.length === 0) {
      this.held = true;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const grant = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(true);
      };
      this.line.push(grant);
      if (deadline !== null) {
        timer = setTimeout(() => {
          const at = this.line.indexOf(grant);
          if (at >= 0) this.line.splice(at, 1);
          resolve(false);
        }, Math.min(Math.max(deadline - now(), 0), MAX_TIMER));
      }
    });
  }

  /** Hands the turn to the next in line, if any. */
  release(): void {
    const next = this.line.shift();
    if (next === undefined) this.held = false;
    else next();
  }
}

/** The local line of waiters for one key. */
export class KeyLine {
  readonly turn = new FifoTurn();
  /** Fired (and replaced) on every notification for the key, and when the listener is lost. */
  changed = new Signal();
  /** Listener generation in which the key was watched (0: not yet). */
  watchedIn = 0;
  users = 0;

  constructor(readonly key: string) {}

  bump(): void {
    const changed = this.changed;
    this.changed = new Signal();
    changed.fire();
  }
}

/** The waiting state one client (and its `withOwner` copies) share. */
export class Waits {
  private readonly lines = new Map<string, KeyLine>();
  private readonly byChannel = new Map<string, Set<string>>();
  readonly listener: Listener | null;

  constructor(listener: ((waits: Waits) => Listener) | null, readonly maxPollInterval: number) {
    this.listener = listener === null ? null : listener(this);
  }

  get listens(): boolean {
    return this.listener !== null;
  }

  hasLine(key: string): boolean {
    return this.lines.has(key);
  }

  /** How long (ms) a try may wait on the server for a transaction changing the key. */
  settle(deadline: number | null): number | null {
    if (this.listener === null) return 0;
    return deadline === null ? null : Math.max(deadline - now(), 0);
  }

  enter(key: string): KeyLine {
    let line = this.lines.get(key);
    if (line === undefined) {
      line = new KeyLine(key);
      this.lines.set(key, line);
    }
    line.users += 1;
    return line;
  }

  /** Leaves the line; the last to leave stops watching the key (unless a colliding key shares its channel). */
  leave(line: KeyLine, statements: Statements | null): void {
    line.users -= 1;
    if (line.users > 0) return;
    this.lines.delete(line.key);
    let shared = false;
    for (const [channel, keys] of this.byChannel) {
      if (keys.delete(line.key) && keys.size > 0) shared = true;
      if (keys.size === 0) this.byChannel.delete(channel);
    }
    if (!shared && line.watchedIn > 0 && this.listener !== null && statements !== null) {
      this.listener.unwatch(line.key, statements.unwatch);
    }
  }

  /** Makes sure the listener (connected first if need be) watches the line's key. */
  async watch(line: KeyLine, statements: Statements): Promise<void> {
    const listener = this.listener as Listener;
    if (line.watchedIn > 0 && line.watchedIn === listener.generation) return;
    const [generation, channel] = await listener.watch(line.key, statements.watch);
    let keys = this.byChannel.get(channel);
    if (keys === undefined) this.byChannel.set(channel, (keys = new Set()));
    keys.add(line.key);
    line.watchedIn = generation;
  }

  notified(channel: string): void {
    for (const key of this.byChannel.get(channel) ?? []) this.lines.get(key)?.bump();
  }

  lost(): void {
    this.byChannel.clear();
    for (const line of this.lines.values()) {
      line.watchedIn = 0; // to be watched again, on a new listener
      line.bump();
    }
  }

  /** Waits to be the head of `line`, then tries until granted or `deadline` (null then). */
  async wait<T>(
    line: KeyLine,
    deadline: number | null,
    statements: Statements,
    attempt: (settle: number | null) => Promise<T | Busy>,
  ): Promise<T | null> {
    if (!(await line.turn.acquire(deadline))) return null;
    try {
      if (this.listener === null) return await retry(deadline, this.maxPollInterval, attempt);
      for (;;) {
        // Taken before watching and trying: a notification from here on is not missed.
        const changed = line.changed;
        await this.watch(line, statements);
        const tried = await attempt(this.settle(deadline));
        if (!isBusy(tried)) return tried;
        const at = now();
        if (deadline !== null && at >= deadline) return null;
        const pause = tried.retryAfter ?? RECHECK;
        await sleep(deadline === null ? pause : Math.min(pause, deadline - at), changed);
      }
    } finally {
      line.turn.release();
    }
  }
}

/** Tries with `attempt(0)`, pauses (see {@link Backoff}), again, until granted or `deadline`. */
export async function retry<T>(
  deadline: number | null,
  maxInterval: number,
  attempt: (settle: number | null) => Promise<T | Busy>,
): Promise<T | null> {
  const backoff = new Backoff(maxInterval);
  for (;;) {
    const tried = await attempt(0);
    if (!isBusy(tried)) return tried;
    const at = now();
    if (deadline !== null && at >= deadline) return null;
    const pause = backoff.pause(tried.retryAfter);
    await sleep(deadline === null ? pause : Math.min(pause, deadline - at));
  }
}

/**
 * A key watched for its own sake (an election's observer, a wait for a free key): it joins the
 * key's line without taking a turn, so that the line's notifications reach it; `close` leaves.
 */
export class Watched {
  private readonly line: KeyLine;
  private changedSignal: Signal;

  constructor(private readonly waits: Waits, key: string, private readonly statements: Statements) {
    this.line = waits.enter(key);
    this.changedSignal = this.line.changed;
  }

  async start(): Promise<this> {
    try {
      await this.waits.watch(this.line, this.statements);
    } catch (e) {
      this.close();
      throw e;
    }
    return this;
  }

  /** Sleeps until a notification for the key (or the listener's loss) or `timeout` ms, then makes sure the key is watched again. */
  async changed(timeout: number): Promise<void> {
    await sleep(timeout, this.changedSignal);
    this.changedSignal = this.line.changed;
    await this.waits.watch(this.line, this.statements);
  }

  close(): void {
    this.waits.leave(this.line, this.statements);
  }
}
