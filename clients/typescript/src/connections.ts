/**
 * Sending a statement: on which connection, and whether it is prepared. In session mode each
 * statement is prepared once per connection (named by a hash of its text, so that two clients
 * on one pool agree); behind a transaction pooler nothing is (each call is one unnamed
 * statement that leaves nothing behind on the server connection the pooler lent). Rows come as
 * arrays, `int8` as `bigint`, without touching the driver's global type parsers.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';

import { fromDriver } from './errors.js';

const INT8 = 20;
const INT8_ARRAY = 1016;
/** pg's own parser of a type (its typings list only some type ids). */
const pgParser = pg.types.getTypeParser as (oid: number, format?: 'text' | 'binary') => (value: string) => unknown;

/** Type parsers for the client's own queries: `bigint` for `int8` and `int8[]`, else pg's. */
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
    if (oid === INT8) return (value: string) => BigInt(value);
    if (oid === INT8_ARRAY) {
      const strings = pgParser(INT8_ARRAY, 'text') as (value: string) => (string | null)[];
      return (value: string) => strings(value).map((v) => (v === null ? null : BigInt(v)));
    }
    return pgParser(oid, format ?? 'text');
  },
};

export type Row = unknown[];

/** A pool of connections to one database, and how statements are sent on them. */
export class Connections {
  private readonly names = new Map<string, string>();

  constructor(
    readonly pool: pg.Pool,
    readonly transactionPooler: boolean,
    private readonly ownsPool: boolean,
  ) {}

  private query(sql: string, params: unknown[]): pg.QueryArrayConfig {
    const config: pg.QueryArrayConfig = { text: sql, values: params, rowMode: 'array', types };
    if (!this.transactionPooler) {
      let name = this.names.get(sql);
      if (name === undefined) {
        name = `dlock_${createHash('sha256').update(sql).digest('hex').slice(0, 24)}`;
        this.names.set(sql, name);
      }
      config.name = name;
    }
    return config;
  }

  /** Every row of `sql` with `params`, on a pooled connection. */
  async rows(sql: string, params: unknown[]): Promise<Row[]> {
    try {
      return (await this.pool.query(this.query(sql, params))).rows;
    } catch (e) {
      throw fromDriver(e);
    }
  }

  /** The one row of `sql` on a pooled connection. */
  async one(sql: string, params: unknown[]): Promise<Row> {
    return (await this.rows(sql, params))[0] as Row;
  }

  /** A connection out of the pool, until {@link giveBack}. */
  async take(): Promise<pg.PoolClient> {
    try {
      return await this.pool.connect();
    } catch (e) {
      throw fromDriver(e);
    }
  }

  /** Returns a connection to the pool; with `broken`, the pool closes it instead. */
  giveBack(connection: pg.PoolClient, broken?: Error): void {
    connection.release(broken);
  }

  /** Every row of `sql` on `connection`. */
  async run(connection: pg.PoolClient, sql: string, params: unknown[]): Promise<Row[]> {
    try {
      return (await connection.query(this.query(sql, params))).rows;
    } catch (e) {
      throw fromDriver(e);
    }
  }

  /** Closes the pool, if it is the client's own. */
  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }
}
