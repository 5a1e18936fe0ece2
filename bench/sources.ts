/**
 * Keyed JSON Lines sources (run: `npx tsx bench/sources.ts`; prints JSON lines).
 *
 * C15 keeps numeric keys exactly as written (`Sources.keyOfLine`): a cheap check on the line
 * and `lossless-json` only where the text and the number differ. This measures what that costs
 * against the previous way of keying (`keyOfRow` on the parsed row: `JSON.stringify` of the
 * number), side by side in one process, on `BENCH_ROWS` rows (default 200k) of four shapes:
 *
 * - `string-ids`: `{"id":"r123","text":"…"}` (keys that never needed anything);
 * - `int-ids`: `{"id":123,"text":"…"}` with prose (dots, digits) in the text: the fast path;
 * - `int-ids-nested`: the same with `"id"` also in a nested object: every line re-read
 *   losslessly (the worst case of a plain integer key);
 * - `big-ids`: every id beyond 2^53: every line re-read losslessly (the rows C15 is about).
 *
 * Each shape is read `BENCH_ROUNDS` times (default 3, the best kept) through the whole stream
 * (`jsonlRows` + keying + the duplicate check). `ratio` = new time ÷ old time (wall), beside
 * `cpu_ratio` (process CPU time, less disturbed by a loaded machine). `scan_unkeyed_ms`: the
 * new load-time scan of an unkeyed file for integers beyond 2^53 (`scanSource` without a
 * key field: lines are not parsed), beside `parse_all_ms` (reading and `JSON.parse` of every
 * line, what a run does anyway).
 */
import { NodeContext } from "@effect/platform-node"
import { Effect, Either, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { checkKeys, jsonlRows, keyOfRow, scanSource } from "../src/tasks/internal/sources.js"

const N = Number(process.env.BENCH_ROWS ?? 200_000)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const dir = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-sources-"))
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o))

const prose = (i: number) => `Message ${i}. Dear user, your order no. 4.5e3 of ${i % 97} items ships soon. Thanks!`
const shapes: Record<string, (i: number) => string> = {
  "string-ids": (i) => JSON.stringify({ id: `r${i}`, text: prose(i) }),
  "int-ids": (i) => JSON.stringify({ id: i, text: prose(i) }),
  "int-ids-nested": (i) => JSON.stringify({ id: i, meta: { id: i % 10 }, text: prose(i) }),
  "big-ids": (i) => `{"id":${1311112222333344445n + BigInt(i)},"text":${JSON.stringify(prose(i))}}`
}

/** The keying before C15: `keyOfRow` on the parsed row, one map entry per key. */
const oldKeys = (file: string) =>
  Stream.suspend(() => {
    const seen = new Map<string, number>()
    return Stream.mapEffect(jsonlRows(file), (r) => {
      const key = keyOfRow(r.value, "id")
      if (Either.isLeft(key)) return Effect.die(key.left)
      // (no failure on a repeat: the old keying makes big ids collide, which is the C15 bug)
      if (!seen.has(key.right)) seen.set(key.right, r.line)
      return Effect.as(Effect.void, r)
    })
  })

const timed = <A, E>(effect: Effect.Effect<A, E, never>) =>
  Effect.gen(function*() {
    let best = { ms: Infinity, cpuMs: Infinity }
    for (let round = 0; round < ROUNDS; round++) {
      const cpu0 = process.cpuUsage()
      const t0 = performance.now()
      yield* effect
      const ms = performance.now() - t0
      const cpu = process.cpuUsage(cpu0)
      const cpuMs = (cpu.user + cpu.system) / 1000
      if (ms < best.ms) best = { ms, cpuMs }
    }
    return best
  })

const program = Effect.gen(function*() {
  emit({ bench: "sources", rows: N, rounds: ROUNDS, load: os.loadavg().map((l) => Math.round(l * 100) / 100) })
  for (const [shape, line] of Object.entries(shapes)) {
    const file = nodePath.join(dir, `${shape}.jsonl`)
    fs.writeFileSync(file, Array.from({ length: N }, (_, i) => line(i)).join("\n") + "\n")
    const run = <A, E>(s: Stream.Stream<A, E, NodeContext.NodeContext>) =>
      Stream.runDrain(s).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
    const before = yield* timed(run(oldKeys(file)))
    const after = yield* timed(run(checkKeys(file, "id", jsonlRows(file))))
    const parseAll = yield* timed(run(jsonlRows(file)))
    const scan = yield* timed(scanSource(file, { maxRows: Number.MAX_SAFE_INTEGER }).pipe(Effect.provide(NodeContext.layer), Effect.orDie))
    emit({
      shape,
      old_ms: Math.round(before.ms),
      new_ms: Math.round(after.ms),
      ratio: Math.round((after.ms / before.ms) * 100) / 100,
      old_cpu_ms: Math.round(before.cpuMs),
      new_cpu_ms: Math.round(after.cpuMs),
      cpu_ratio: Math.round((after.cpuMs / before.cpuMs) * 100) / 100,
      rows_per_s_new: Math.round(N / (after.ms / 1000)),
      parse_all_ms: Math.round(parseAll.ms),
      scan_unkeyed_ms: Math.round(scan.ms)
    })
  }
  fs.rmSync(dir, { recursive: true, force: true })
})

Effect.runPromise(program).catch((e) => {
  console.error(e)
  process.exit(1)
})
