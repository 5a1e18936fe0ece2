/**
 * File artifact backend benchmark (run: `npx tsx bench/artifacts.ts`; prints JSON lines).
 *
 * Issue 12 §8 moved the file backend's blob writes onto the one atomic writer
 * (`OutputFile.writeAll`: a temp file beside the blob, `fsync`, rename, stale temps swept)
 * from its own temp + rename without `fsync`. This measures both side by side in one process:
 * `BENCH_BLOBS` (default 200) distinct payloads of `BENCH_BLOB_KB` KiB (default 256, the
 * backend's default `minBytes`) put into a fresh root each round, in `BENCH_ROUNDS` (default
 * 3) alternating rounds.
 *
 * - `backend`: `ArtifactBackends.makeFile(...).put` (the code as shipped, through OutputFile);
 * - `plain`: the former write, reproduced: `fs.writeFile(tmp)` then `fs.rename(tmp, blob)`.
 *
 * Each line: `blobs_per_s` (wall), `cpu_s` (process CPU, all threads) and, on the backend
 * line, `ratio_to_plain` (blobs/s ÷ the plain write's) and `cpu_ratio_to_plain`. The cost of
 * the change is the `fsync` per blob, which the wall clock shows and the CPU time mostly not.
 */
import { NodeFileSystem } from "@effect/platform-node"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { performance } from "node:perf_hooks"
import { digestFull } from "../src/domain/Json.js"
import * as ArtifactBackends from "../src/layers/ArtifactBackends.js"

const blobs = Number(process.env["BENCH_BLOBS"] ?? 200)
const size = Number(process.env["BENCH_BLOB_KB"] ?? 256) * 1024
const rounds = Number(process.env["BENCH_ROUNDS"] ?? 3)

const payloads = Array.from({ length: blobs }, (_, i) => {
  const p = new Uint8Array(size)
  for (let j = 0; j < size; j += 4096) p[j] = (i * 31 + j) & 0xff
  new DataView(p.buffer).setUint32(0, i)
  return p
})

const timed = async (f: () => Promise<void>) => {
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await f()
  const wall = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  return { wall, cpu: (cpu.user + cpu.system) / 1e6 }
}

const viaBackend = (root: string) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const backend = yield* ArtifactBackends.makeFile({ root })
      for (const p of payloads) yield* backend.put(p)
    }).pipe(Effect.provide(NodeFileSystem.layer))
  )

const plain = async (root: string) => {
  for (const p of payloads) {
    const ref = digestFull(p)
    const dir = `${root}/${ref.slice(0, 2)}`
    await fs.promises.mkdir(dir, { recursive: true })
    const tmp = `${root}/.tmp-${ref.slice(0, 16)}-${Math.random()}`
    await fs.promises.writeFile(tmp, p)
    await fs.promises.rename(tmp, `${dir}/${ref}`)
  }
}

const main = async () => {
  for (let r = 0; r < rounds; r++) {
    const base = fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-bench-artifacts-"))
    try {
      const p = await timed(() => plain(nodePath.join(base, "plain")))
      const b = await timed(() => viaBackend(nodePath.join(base, "backend")))
      const common = { bench: "artifacts", round: r, blobs, blob_kb: size / 1024, load: os.loadavg()[0] }
      console.log(JSON.stringify({ ...common, kind: "plain", blobs_per_s: +(blobs / p.wall).toFixed(1), cpu_s: +p.cpu.toFixed(3) }))
      console.log(JSON.stringify({
        ...common,
        kind: "backend",
        blobs_per_s: +(blobs / b.wall).toFixed(1),
        cpu_s: +b.cpu.toFixed(3),
        ratio_to_plain: +(p.wall / b.wall).toFixed(3),
        cpu_ratio_to_plain: +(p.cpu / b.cpu).toFixed(3)
      }))
    } finally {
      fs.rmSync(base, { recursive: true, force: true })
    }
  }
}

main()
