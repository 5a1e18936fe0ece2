/**
 * Sharding: splitting one dataset across several processes, each with its own store.
 *
 * A store takes one writer, so scaling out means N processes, each running the pipelines of
 * its shard into its own store, merged afterwards. The assignment is a pure function of the
 * content-addressed pipeline key (BLAKE2b-512, not a salted hash), so the same dataset is
 * always cut the same way, on every machine, and a resumed pipeline goes back to the shard
 * that owns it. Balance is statistical only.
 *
 * @since 0.1.0
 */
import { Either, Stream } from "effect"
import { ConfigError } from "./Errors.js"
import { digestFull } from "./Json.js"

const checkCount = (count: number): void => {
  if (!Number.isSafeInteger(count) || count < 1) {
    throw new RangeError(`shard count must be an integer >= 1, got ${count}`)
  }
}

/**
 * The shard (0-based) a key belongs to: the full BLAKE2b-512 digest of the key's UTF-8 bytes,
 * read as a 512-bit unsigned big-endian integer, modulo `count`. Stable across processes,
 * machines and releases.
 *
 * Throws a `RangeError` when `count` is not an integer ≥ 1 (validate user input with
 * {@link parseShard} first).
 *
 * @since 0.1.0
 * @category sharding
 */
export const shardIndex = (key: string, count: number): number => {
  checkCount(count)
  if (count === 1) return 0
  return Number(BigInt(`0x${digestFull(key)}`) % BigInt(count))
}

/**
 * Whether `key` belongs to shard `index` of `count` (see {@link shardIndex}).
 *
 * @since 0.1.0
 * @category sharding
 */
export const inShard = (key: string, index: number, count: number): boolean => shardIndex(key, count) === index

/**
 * Keeps the elements of a stream that belong to shard `index` of `count`; `keyOf` gives an
 * element's key (normally its content-addressed pipeline id).
 *
 * @since 0.1.0
 * @category sharding
 */
export const shardSpecs = <A, E, R>(
  stream: Stream.Stream<A, E, R>,
  index: number,
  count: number,
  keyOf: (a: A) => string
): Stream.Stream<A, E, R> => {
  checkCount(count)
  return Stream.filter(stream, (a) => inShard(keyOf(a), index, count))
}

/**
 * A shard selector `{ index, count }`: 0-based `index`, `0 <= index < count`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ShardSelector {
  readonly index: number
  readonly count: number
}

/**
 * Parses a shard selector written `"index/count"` (`"0/4"`), with validation: both integers,
 * `count >= 1`, `0 <= index < count`. Fails with a {@link ConfigError} whose message says what
 * is wrong and how to write it.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseShard = (text: string): Either.Either<ShardSelector, ConfigError> => {
  const fail = (message: string) =>
    Either.left(
      new ConfigError({
        message,
        issues: [{ path: "shard", message, suggestion: "write the shard as INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4" }]
      })
    )
  const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(text)
  if (m === null) {
    return fail(`invalid shard "${text}": expected INDEX/COUNT with two non-negative integers, e.g. "0/4"`)
  }
  const index = Number(m[1])
  const count = Number(m[2])
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(count)) {
    return fail(`invalid shard "${text}": numbers too large`)
  }
  if (count < 1) return fail(`invalid shard "${text}": the shard count must be at least 1`)
  if (index >= count) {
    return fail(`invalid shard "${text}": the index must be between 0 and ${count - 1} (indexes are 0-based)`)
  }
  return Either.right({ index, count })
}

/**
 * The store path of one shard: the shard suffix goes before the file's extension
 * (`runs/qa.db` → `runs/qa.shard0of4.db`), or at the end when the file name has none
 * (`runs/qa` → `runs/qa.shard0of4`). Dots in directory names and a leading dot of a hidden
 * file (`.cache/.store` → `.cache/.store.shard0of4`) are not extensions. The in-memory store
 * `":memory:"` is returned unchanged (each process has its own anyway). Pure string work.
 *
 * @since 0.1.0
 * @category sharding
 */
export const shardStorePath = (base: string, index: number, count: number): string => {
  if (base === ":memory:") return base
  const suffix = `.shard${index}of${count}`
  const slash = Math.max(base.lastIndexOf("/"), base.lastIndexOf("\\"))
  const dir = base.slice(0, slash + 1)
  const file = base.slice(slash + 1)
  const dot = file.lastIndexOf(".")
  if (dot <= 0) return `${dir}${file}${suffix}`
  return `${dir}${file.slice(0, dot)}${suffix}${file.slice(dot)}`
}
