/**
 * The listener: one connection on which every wait of a client hears of released keys. The
 * watch and unwatch calls go through it in the order they are made (`dlock_watch` returns the
 * key's channel); a notification names a channel, passed on to the waits. If the connection
 * breaks, every waiter is told (they re-watch on a new one, opened by the next watch, and try
 * again: notifications may have been missed meanwhile).
 */
import pg from 'pg';

import { ConnectionFailedError, fromDriver } from './errors.js';

export class Listener {
  /** Bumped for every new connection: a key watched in an older one must be watched again. */
  generation = 0;
  private connection: pg.Client | null = null;
  /** Calls in the order they were made (connecting included). */
  private order: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly config: () => pg.ClientConfig,
    private readonly onNotify: (channel: string) => void,
    private readonly onLost: () => void,
    private readonly stillWanted: (key: string) => boolean,
  ) {}

  /** Watches `key` (`sql` is `dlock_watch`), connecting first if need be: the generation of the connection it is watched in, and its channel. */
  watch(key: string, sql: string): Promise<[number, string]> {
    return this.inOrder(async () => {
      const connection = await this.connect();
      try {
        const result = await connection.query({ text: sql, values: [key], rowMode: 'array' });
        return [this.generation, String(result.rows[0]?.[0])] as [number, string];
      } catch (e) {
        throw fromDriver(e);
      }
    });
  }

  /** Stops watching `key` in the background, unless a new waiter wants it by then. */
  unwatch(key: string, sql: string): void {
    this.inOrder(async () => {
      const connection = this.connection;
      if (connection === null || this.stillWanted(key)) return;
      await connection.query({ text: sql, values: [key] });
    }).catch(() => {
      // Only extra notifications if it stays watched.
    });
  }

  private inOrder<T>(call: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new ConnectionFailedError('connection: the client is closed'));
    const next = this.order.then(call, call);
    this.order = next.catch(() => undefined);
    return next;
  }

  private async connect(): Promise<pg.Client> {
    if (this.connection !== null) return this.connection;
    const connection = new pg.Client(this.config());
    const lost = () => {
      if (this.connection !== connection) return;
      this.connection = null;
      connection.end().catch(() => undefined);
      if (!this.closed) this.onLost();
    };
    connection.on('notification', (n) => this.onNotify(n.channel));
    connection.on('error', lost);
    connection.on('end', lost);
    try {
      await connection.connect();
    } catch (e) {
      connection.removeAllListeners();
      connection.on('error', () => undefined);
      throw fromDriver(e);
    }
    this.connection = connection;
    this.generation += 1;
    return connection;
  }

  /** Closes the connection. */
  async close(): Promise<void> {
    this.closed = true;
    await this.order;
    const connection = this.connection;
    this.connection = null;
    if (connection !== null) await connection.end().catch(() => undefined);
  }
}
