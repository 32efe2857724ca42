/**
 * Argument checks made before anything is sent, with the limits of the contract
 * (`core/src/limits.rs`, `core/src/args.rs`): wrong types throw `TypeError`, wrong values
 * `RangeError` (see {@link badArgument}). Durations are milliseconds. `dlock.max_ttl` is the
 * server's alone to check.
 */
import { badArgument } from './errors.js';

/** Longest key, in bytes (UTF-8), not characters. */
export const MAX_KEY_BYTES = 1024;
/** Longest owner string, in bytes. */
export const MAX_OWNER_BYTES = 256;
/** Most keys of one multi-key lock. */
export const MAX_KEYS_PER_CALL = 64;
/** Longest election `info`, in bytes. */
export const MAX_INFO_BYTES = 1024;
/** Largest semaphore size the server takes (an `int4`). */
export const MAX_PERMITS = 2 ** 31 - 1;
/** Longer durations are taken as this (about 285,000 years), as the Rust client's. */
export const MAX_MS = 9_000_000_000_000_000;

const encoder = new TextEncoder();
/** Half of a surrogate pair without its other half: not encodable as UTF-8. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function typeName(value: unknown): string {
  return value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
}

/** A key, owner or election name: a non-empty string of at most `maxBytes` UTF-8 bytes. */
export function text(what: string, value: unknown, maxBytes: number): string {
  if (typeof value !== 'string') throw badArgument(`${what} must be a string, not ${typeName(value)}`, 'type', '22004');
  if (value.length === 0) throw badArgument(`${what} must not be empty`);
  if (LONE_SURROGATE.test(value)) throw badArgument(`${what} is not valid UTF-16 (a lone surrogate)`, 'range', '22021');
  const size = encoder.encode(value).length;
  if (size > maxBytes) throw badArgument(`${what} is ${size} bytes long, the limit is ${maxBytes} bytes`);
  // PostgreSQL's text has no NUL: the server would refuse it with 22021.
  if (value.includes('\0')) throw badArgument(`${what} must not contain NUL characters`, 'range', '22021');
  return value;
}

export const key = (value: unknown): string => text('key', value, MAX_KEY_BYTES);
export const owner = (value: unknown): string => text('owner', value, MAX_OWNER_BYTES);

function number(what: string, value: unknown): number {
  if (typeof value !== 'number') throw badArgument(`${what} must be a number of milliseconds, not ${typeName(value)}`, 'type');
  if (Number.isNaN(value)) throw badArgument(`${what} must be a number of milliseconds, not NaN`);
  return Math.min(value, MAX_MS);
}

/** A duration that may be zero (a wait, a lock-delay), in milliseconds. */
export function millis(what: string, value: unknown): number {
  const ms = number(what, value);
  if (ms < 0) throw badArgument(`${what} must not be negative`);
  return ms;
}

/** A duration that must be more than zero (at least a microsecond, the server's unit). */
export function positive(what: string, value: unknown): number {
  const ms = number(what, value);
  if (ms < 0.001) throw badArgument(`${what} must be positive`);
  return ms;
}

/** A ttl: `null` (a session-bound lease) or positive. */
export const ttl = (value: unknown): number | null => (value === null ? null : positive('ttl', value));
/** A wait: `null` (without limit) or zero (one try) and up. */
export const wait = (value: unknown): number | null => (value === null ? null : millis('wait', value));

/** A semaphore's size: an integer from 1 to 2**31 - 1. */
export function permits(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw badArgument(`permits must be an integer, not ${typeName(value)}`, 'type');
  if (value < 1) throw badArgument(`a semaphore needs at least 1 permit (max_holders >= 1), not ${value}`);
  if (value > MAX_PERMITS) throw badArgument(`permits is ${value}, the limit is ${MAX_PERMITS}`);
  return value;
}

/** The keys of a multi-key lock: 1 to 64 valid keys, none twice. */
export function keys(value: unknown): string[] {
  if (typeof value === 'string' || value === null || typeof value !== 'object' || !(Symbol.iterator in value)) {
    throw badArgument(`keys must be an iterable of strings, not ${typeName(value)}`, 'type');
  }
  const checked = Array.from(value as Iterable<unknown>, key);
  if (checked.length === 0) throw badArgument('keys must not be empty');
  if (checked.length > MAX_KEYS_PER_CALL) throw badArgument(`keys has ${checked.length} elements, the limit is ${MAX_KEYS_PER_CALL}`);
  const seen = new Set<string>();
  for (const k of checked) {
    if (seen.has(k)) throw badArgument(`keys lists ${JSON.stringify(k)} twice`);
    seen.add(k);
  }
  return checked;
}

/** An election's `info`: `null`/undefined or a string of at most 1024 bytes. */
export function info(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw badArgument(`info must be a string, not ${typeName(value)}`, 'type');
  const size = encoder.encode(value).length;
  if (size > MAX_INFO_BYTES) throw badArgument(`info is ${size} bytes long, the limit is ${MAX_INFO_BYTES} bytes`);
  return value;
}

/** A boolean option. */
export function flag(what: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw badArgument(`${what} must be a boolean, not ${typeName(value)}`, 'type');
  return value;
}
