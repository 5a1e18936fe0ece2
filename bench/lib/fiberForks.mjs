// Counts the fibers a process forks and joins, and where (issue 17, BENCHMARKS.md fib17an).
//
// How to run it: on a cluster bench's runners (they run on the unbundled runtime, `dist/`, which
// imports `effect` from node_modules; a process on the CLI bundle, its own copy of Effect, counts
// nothing here):
//
//   BENCH_FIBERS_DIR=/tmp/fibers BENCH_CLUSTER_PIPELINES=300 BENCH_CLUSTER_ONLY=cluster \
//   BENCH_CLUSTER_RUNNER_NODE_ARGS="--import $PWD/bench/lib/fiberForks.mjs" \
//   npx tsx --conditions=assay-source bench/cluster.ts
//   node bench/lib/fiberForks.mjs --per=900 /tmp/fibers/*.json    # sums the runners, per task
//
// (`--per` = the run's tasks: pipelines × 3.) Each process writes `{ pid, forks, joins, diffs,
// sites }` to `$BENCH_FIBERS_DIR/<pid>.json` at exit (the bench stops runners started with node
// arguments with SIGTERM, so the exit handler runs); the counts include the process's start.
//
// - forks: `FiberRuntime`s constructed (every child fiber: `fork`, `forkDaemon`, `forkScoped`,
//   `forkIn`, concurrent `forEach`/`all`, `race`, `timeout`, …; and the root fibers of `runFork`).
// - joins: `FiberRefs.joinAs` calls: a child's FiberRefs merged back into its parent's
//   (`Fiber.join`, `inheritAll`, the concurrent combinators, `Effect.inheritFiberRefs`).
// - diffs: Effect's `Context` diffs (`differ/contextPatch.js` `diff`: a `Map` of the whole service
//   context, O(services)): at a join where the child's Context changed, around `addFinalizer`'s
//   finalizers, `Effect.diffFiberRefs` & co.
//
// The site of each: a fiber forks (and joins) while the fiber runtime evaluates an instruction,
// whose JavaScript stack is the runtime's loop; what built that instruction has long returned. So a
// loader hook on Effect's `EffectPrimitive` constructor (internal/core.js) gives every instruction
// a site at construction: the assay frames (`dist/`, `src/`) on the stack then (and other packages' than `effect`'s: `@effect/cluster`, …), or, where there
// are none (an instruction built by Effect while evaluating another), the site of the instruction
// being evaluated. A fork, join or diff takes the site of the instruction being evaluated, plus the
// Effect function that did it (`effect:forkDaemon`, …). Every instruction takes a stack: run it
// on a small bench (a few hundred pipelines), never to measure time. Costs nothing when unset.
import * as fs from "node:fs"
import { createRequire, register } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const summarize = () => {
  // node bench/lib/fiberForks.mjs --per=TASKS FILE…
  const per = Number((process.argv.find((a) => a.startsWith("--per=")) ?? "--per=1").slice(6))
  const files = process.argv.slice(2).filter((a) => !a.startsWith("--"))
  const totals = { forks: 0, joins: 0, diffs: 0 }
  const sites = { fork: new Map(), join: new Map(), diff: new Map() }
  for (const f of files) {
    const r = JSON.parse(fs.readFileSync(f, "utf8"))
    for (const k of Object.keys(totals)) totals[k] += r[k]
    for (const k of Object.keys(sites)) for (const [n, s] of r.sites[k]) sites[k].set(s, (sites[k].get(s) ?? 0) + n)
  }
  const out = { per_task: Object.fromEntries(Object.entries(totals).map(([k, v]) => [k, +(v / per).toFixed(2)])) }
  for (const k of Object.keys(sites)) {
    out[`${k}_sites_per_task`] = [...sites[k]].sort((a, b) => b[1] - a[1]).slice(0, 30).map(([s, n]) => [+(n / per).toFixed(3), s])
  }
  console.log(JSON.stringify(out, null, 1))
}

const dir = process.env.BENCH_FIBERS_DIR
if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) summarize()
else if (dir !== undefined) {
  const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..")
  const effectDir = path.dirname(createRequire(path.join(root, "package.json")).resolve("effect/package.json"))
  const hook = `export async function load(url, context, next) {
    const r = await next(url, context)
    const patch = (from, to) => {
      const src = String(r.source)
      if (!src.includes(from)) throw new Error("fiberForks.mjs: not found in " + url + ": " + from)
      return { ...r, source: src.replace(from, to), shortCircuit: true }
    }
    if (url.endsWith("/effect/dist/esm/internal/core.js"))
      return patch("constructor(_op) {\\n    this._op = _op;", "constructor(_op) {\\n    this._op = _op; globalThis.__fibNew?.(this);")
    if (url.endsWith("/effect/dist/esm/internal/differ/contextPatch.js"))
      return patch("export const diff = (oldValue, newValue) => {", "export const diff = (oldValue, newValue) => { globalThis.__fibCount?.('diff');")
    if (url.endsWith("/effect/dist/esm/internal/core-effect.js"))
      return patch("=> FiberRefs.joinAs(parentFiberRefs, parentFiberId, childFiberRefs));", "=> (globalThis.__fibCount?.('join'), FiberRefs.joinAs(parentFiberRefs, parentFiberId, childFiberRefs)));")
    if (url.endsWith("/effect/dist/esm/internal/fiberRuntime.js")) {
      const src = String(r.source)
      const a = "constructor(fiberId, fiberRefs0, runtimeFlags0) {\\n    super();"
      const b = "const updatedFiberRefs = fiberRefs.joinAs("
      if (!src.includes(a) || !src.includes(b)) throw new Error("fiberForks.mjs: fiberRuntime.js not as expected")
      return { ...r, source: src.replace(a, a + " globalThis.__fibCount?.('fork');").replace(b, "globalThis.__fibCount?.('join'); " + b), shortCircuit: true }
    }
    return r
  }`
  register(`data:text/javascript,${encodeURIComponent(hook)}`)
  const frameOf = (line) => line.trim().replace(/^at /, "").replace(/file:\/\/\S*?\/node_modules\//, "").replace(/file:\/\/\S*?\/(dist|src)\//, "$1/").replace(/:\d+\)$/, ")")
  // the assay frames on the stack now (null: none)
  const ownSite = () => {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 30
    const lines = (new Error().stack ?? "").split("\n").slice(3)
    Error.stackTraceLimit = limit
    const out = []
    for (const line of lines) {
      if (line.includes("/node_modules/effect/") || line.includes("node:") || line.includes("fiberForks.mjs") || line.includes("data:text")) continue
      if (!/\/(dist|src)\//.test(line)) continue
      out.push(frameOf(line))
      if (out.length >= 6) break
    }
    return out.length === 0 ? null : out.join(" <- ")
  }
  // the first Effect function on the stack below the runtime's own frames: what forked or joined
  const effectFn = () => {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 12
    const lines = (new Error().stack ?? "").split("\n").slice(3)
    Error.stackTraceLimit = limit
    const names = []
    for (const line of lines) {
      if (!line.includes("/node_modules/effect/")) continue
      const m = /at (?:new )?(\S+) \(/.exec(line)
      const name = m === null ? "<anonymous>" : m[1]
      if (/^(FiberRuntime\.|Object\.|runLoop|evaluateEffect|drainQueue|<anonymous>)/.test(name)) continue
      names.push(name)
      if (names.length >= 2) break
    }
    return names.length === 0 ? "" : `effect:${names.join("<")} `
  }
  let current = undefined
  globalThis.__fibNew = (prim) => {
    prim.__fibSite = ownSite() ?? current?.__fibSite
  }
  const counts = { fork: 0, join: 0, diff: 0 }
  const sites = { fork: new Map(), join: new Map(), diff: new Map() }
  globalThis.__fibCount = (kind) => {
    counts[kind]++
    const site = `${effectFn()}<- ${current?.__fibSite ?? ownSite() ?? "(no assay frame)"}`
    sites[kind].set(site, (sites[kind].get(site) ?? 0) + 1)
  }
  const { FiberRuntime } = await import(pathToFileURL(path.join(effectDir, "dist/esm/internal/fiberRuntime.js")).href)
  const proto = FiberRuntime.prototype
  for (const op of ["Sync", "Success", "Failure", "WithRuntime", "UpdateRuntimeFlags", "OnSuccess", "OnFailure", "OnSuccessAndFailure", "Async", "Yield", "While", "Iterator", "Commit", "Tag"]) {
    const original = proto[op]
    if (typeof original !== "function") continue
    const applies = op === "Success" || op === "Failure"
    proto[op] = function (prim) {
      const before = current
      // a Success or Failure applies the continuation on top of the fiber's stack: its site
      current = applies ? (this._stack?.[this._stack.length - 1] ?? prim) : prim
      try {
        return original.call(this, prim)
      } finally {
        current = before
      }
    }
  }
  const write = () => {
    const top = (m) => [...m].sort((a, b) => b[1] - a[1]).slice(0, 200).map(([s, n]) => [n, s])
    const file = path.join(dir, `${process.pid}.json`)
    fs.writeFileSync(`${file}.tmp`, JSON.stringify({ pid: process.pid, forks: counts.fork, joins: counts.join, diffs: counts.diff, sites: { fork: top(sites.fork), join: top(sites.join), diff: top(sites.diff) } }))
    fs.renameSync(`${file}.tmp`, file)
  }
  process.on("exit", write)
}
