/**
 * The spec streams made by `Template.map`, known by identity: the runner reads such a stream
 * in batches of up to 256 specs (`Stream.rechunk`), while `map` reads a synchronous seed
 * source `chunkSize` (16) seeds at a time. Each of those small chunks costs a pass through
 * the stream machinery (about 0.1 s of CPU per 200,000 seeds), so the runner asks for the same
 * stream reading its batch size at once ({@link withReadAhead}). Only the stream object `map`
 * returned is known: any stream made from it (`Stream.take`, a suite's tagging, sharding)
 * is not, and is read as it is.
 *
 * Reading a batch's worth of seeds at once reads nothing more than the runner's batching
 * already pulls before it admits the batch.
 *
 * @internal
 */
import type { Stream } from "effect"

const remakers = new WeakMap<object, (readAhead: number) => Stream.Stream<unknown, unknown, unknown>>()

/**
 * Records that `stream` can be made again reading `readAhead` seeds per chunk (by `remake`).
 *
 * @internal
 */
export const register = <S extends Stream.Stream<any, any, any>>(
  stream: S,
  remake: (readAhead: number) => S
): S => {
  remakers.set(stream, remake as (readAhead: number) => Stream.Stream<unknown, unknown, unknown>)
  return stream
}

/**
 * The same stream of specs as `stream`, reading at least `readAhead` seeds per chunk when
 * `stream` is one that `Template.map` returned (`undefined` otherwise).
 *
 * @internal
 */
export const withReadAhead = <S>(stream: S, readAhead: number): S | undefined => {
  if (typeof stream !== "object" || stream === null) return undefined
  const remake = remakers.get(stream)
  return remake === undefined ? undefined : remake(readAhead) as S
}
