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
// `BENCH_OPS_STACKS=Op1,Op2` (opcodes, e.g. `UpdateRuntimeFlags,WithRuntime`): where the
// instructions of those ops were *built*. When the fiber runtime evaluates an instruction,
// the code that built it has long returned (the JavaScript stack is the runtime's loop), so
// the stack is taken at construction: a loader hook adds a call to Effect's `EffectPrimitive`
// constructor (internal/core.js), and 1 in `BENCH_OPS_STACKS_EVERY` (default 31) instructions
// of those ops, and of `Commit` (what `uninterruptibleMask`, `acquireUseRelease` & co. build at
// their call site, whose instructions are built only when it is evaluated), keep
// `new Error().stack` (`Error.stackTraceLimit` 40). An instruction built while a `Commit` is
// evaluated takes the Commit's stack (or none, when that one was not sampled). Each sampled
// instruction counts its stack at its first evaluation (a constant effect evaluated again and
// again is under-counted): `stacks`, `[estimated count,
// "Op <- frame <- …"]`, at most 8 frames, Node's left out, Effect's by function name only
// (`effect:acquireUseRelease`), the others as `name (path:line)` from `dist/`, `src/` or
// `node_modules/`. Costs nothing when unset.
//
// A process on the CLI bundle (its own copy of Effect) counts nothing here.
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { register } from "node:module"

const dir = process.env.BENCH_OPS_DIR
const top = Number(process.env.BENCH_OPS_TOP ?? 0)
const stackOps = new Set((process.env.BENCH_OPS_STACKS ?? "").split(",").filter((s) => s !== ""))
const stackEvery = Number(process.env.BENCH_OPS_STACKS_EVERY ?? 31)
if (dir !== undefined) {
  const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..")
  const effectDir = path.dirname(createRequire(path.join(root, "package.json")).resolve("effect/package.json"))
  if (stackOps.size > 0) {
    // before Effect is loaded: its primitives' constructor reports each new instruction
    const hook = `export async function load(url, context, next) {
      const r = await next(url, context)
      if (!url.endsWith("/effect/dist/esm/internal/core.js")) return r
      const src = String(r.source).replace("constructor(_op) {\\n    this._op = _op;", "constructor(_op) {\\n    this._op = _op; globalThis.__effectOpsNew?.(this);")
      return { ...r, source: src, shortCircuit: true }
    }`
    register(`data:text/javascript,${encodeURIComponent(hook)}`)
  }
  const { FiberRuntime } = await import(pathToFileURL(path.join(effectDir, "dist/esm/internal/fiberRuntime.js")).href)
  const counts = new Map()
  const sites = new Map()
  const stacks = new Map()
  let n = 0
  const frameOf = (line) => line.trim().replace(/^at /, "").replace(/file:\/\/\S*?\/(dist|src|node_modules)\//, "$1/").replace(/:\d+\)$/, "")
  // the instruction being built inside a Commit's evaluation takes its site (null: a Commit not sampled)
  let inherited = undefined
  let c = 0
  const stackOf = () => {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 40
    const lines = (new Error().stack ?? "").split("\n").slice(3)
    Error.stackTraceLimit = limit
    const out = []
    for (const line of lines) {
      if (line.includes("node:") || line.includes("effectOps.mjs") || line.includes("data:text")) continue
      const m = /at (?:async )?(\S+) \(/.exec(line)
      const name = m === null ? "<anonymous>" : m[1]
      if (line.includes("/node_modules/effect/")) out.push(`effect:${name}`)
      else out.push(`${name} ${frameOf(line).replace(/^.*?\(/, "")}`)
      if (out.length >= 8) break
    }
    return out.join(" <- ")
  }
  if (stackOps.size > 0) {
    globalThis.__effectOpsNew = (prim) => {
      const op = prim._op
      if (op === "Commit" || stackOps.has(op)) {
        if (inherited !== undefined) {
          if (inherited !== null) prim.__opsSite = inherited
        } else if (++c % stackEvery === 0) prim.__opsSite = stackOf()
      }
    }
  }
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
      if (stackOps.size > 0) {
        // each sampled instruction counts (and passes its site on) at its first evaluation only:
        // a constant effect evaluated many times is not counted 31 times over
        const site = current.__opsSite
        if (site !== undefined) current.__opsSite = undefined
        if (site !== undefined && stackOps.has(op)) {
          const key = `${op} <- ${site}`
          stacks.set(key, (stacks.get(key) ?? 0) + 1)
        }
        if (op === "Commit") {
          const before = inherited
          inherited = site ?? null
          try {
            return original.call(this, current)
          } finally {
            inherited = before
          }
        }
      }
      return original.call(this, current)
    }
  }
  const write = () => {
    const ops = [...counts.values()].reduce((a, b) => a + b, 0)
    const sampled = [...sites].sort((a, b) => b[1] - a[1]).slice(0, top).map(([site, c]) => [c * 97, site])
    const stacked = [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 200).map(([key, c]) => [c * stackEvery, key])
    // written whole, then renamed: the bench reads the file as soon as it exists (a large one,
    // with stacks, was read half-written: ops17am)
    const file = path.join(dir, `${process.pid}.json`)
    fs.writeFileSync(`${file}.tmp`, JSON.stringify({ pid: process.pid, ops, byOp: Object.fromEntries(counts), top: sampled, stacks: stacked }))
    fs.renameSync(`${file}.tmp`, file)
  }
  process.on("SIGUSR2", write)
  process.on("exit", write)
}
