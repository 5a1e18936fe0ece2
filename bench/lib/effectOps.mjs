// Counts the Effect operations a process evaluates (bench/cluster.ts, `BENCH_CLUSTER_OPS=1`).
//
// Loaded with `node --import` (through NODE_OPTIONS) into an `assay` process running on the
// unbundled runtime (`dist/`, which imports `effect` from node_modules). It wraps every
// instruction handler of Effect's fiber runtime (`FiberRuntime.prototype[opcode]`) with a
// counter. On SIGUSR2 (and at exit) it writes `{ pid, ops, byOp, top }` to `$BENCH_OPS_DIR/<pid>.json`
// synchronously, so that the bench can read the count at the instants it chooses. `top` holds
// the continuations sampled 1 in 97 (`BENCH_OPS_TOP`, default 0: no sampling), each with
// its estimated count: what the operations are spent on.
//
// A process on the CLI bundle (its own copy of Effect) counts nothing here.
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const dir = process.env.BENCH_OPS_DIR
const top = Number(process.env.BENCH_OPS_TOP ?? 0)
if (dir !== undefined) {
  const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..")
  const effectDir = path.dirname(createRequire(path.join(root, "package.json")).resolve("effect/package.json"))
  const { FiberRuntime } = await import(pathToFileURL(path.join(effectDir, "dist/esm/internal/fiberRuntime.js")).href)
  const counts = new Map()
  const sites = new Map()
  let n = 0
  const fnOf = {
    Sync: "effect_instruction_i0",
    OnSuccess: "effect_instruction_i1",
    OnFailure: "effect_instruction_i1",
    OnSuccessAndFailure: "effect_instruction_i2",
    WithRuntime: "effect_instruction_i0",
    Async: "effect_instruction_i0",
    UpdateRuntimeFlags: "effect_instruction_i1",
    While: "effect_instruction_i1"
  }
  const proto = FiberRuntime.prototype
  for (const op of ["Sync", "Success", "Failure", "WithRuntime", "UpdateRuntimeFlags", "OnSuccess", "OnFailure", "OnSuccessAndFailure", "Async", "Yield", "While", "Iterator", "Commit", "Tag"]) {
    const original = proto[op]
    if (typeof original !== "function") continue
    counts.set(op, 0)
    proto[op] = function (current) {
      counts.set(op, counts.get(op) + 1)
      if (top > 0 && ++n % 97 === 0) {
        const f = op === "Commit" ? current.commit : current[fnOf[op]]
        const site = typeof f === "function" ? `${op} ${f.toString().replace(/\s+/g, " ").slice(0, 140)}` : op
        sites.set(site, (sites.get(site) ?? 0) + 1)
      }
      return original.call(this, current)
    }
  }
  const write = () => {
    const ops = [...counts.values()].reduce((a, b) => a + b, 0)
    const sampled = [...sites].sort((a, b) => b[1] - a[1]).slice(0, top).map(([site, c]) => [c * 97, site])
    fs.writeFileSync(path.join(dir, `${process.pid}.json`), JSON.stringify({ pid: process.pid, ops, byOp: Object.fromEntries(counts), top: sampled }))
  }
  process.on("SIGUSR2", write)
  process.on("exit", write)
}
