/**
 * `Symbol.asyncDispose`, which Node.js has from 20 (18 from 18.18): defined where it is missing,
 * as TypeScript's docs advise, so that leases and clients work with `await using` everywhere.
 */
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol('Symbol.asyncDispose');

export {};
