/**
 * Reading V8 sampling heap profiles (`.heapprofile`: `node --heap-prof`, or
 * `bench/lib/heapSampler.mjs`) for the benches: the sampled bytes by package, by allocating
 * function, and by the nearest caller outside Effect's own runtime (the code that asked for the
 * allocation: an Effect combinator's closure is charged to the assay or library function above it).
 *
 * Run alone: `npx tsx bench/lib/heapprofile.ts [--per=N] [--top=K] FILE…` prints one JSON summary of the
 * files together (the runners of one run), bytes divided by N when given (e.g. the tasks run).
 */
import * as fs from "node:fs"
import { fileURLToPath } from "node:url"

interface Node {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly selfSize: number
  readonly children: ReadonlyArray<Node>
}

/** The package a script URL belongs to (`effect`, `@effect/cluster`, `pg`, `assay`, `node`, …). */
export const packageOf = (url: string): string => {
  if (url === "") return "(vm/native)"
  if (url.startsWith("node:")) return "node"
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)
  if (m !== null) return m[1]!
  if (/\/(dist|src)\//.test(url)) return "assay"
  return "other"
}

const key = (n: Node) => `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.replace(/^.*node_modules\//, "").replace(/^.*\/(dist|src)\//, "$1/")}:${n.callFrame.lineNumber + 1}`

/** The sampled bytes of `files`: in all, by package, by allocating function, by nearest non-Effect caller. */
export const summarize = (files: ReadonlyArray<string>, per = 1, top = 25) => {
  const byPackage = new Map<string, number>()
  const byFn = new Map<string, number>()
  const byCaller = new Map<string, number>()
  let total = 0
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v)
  const walk = (n: Node, caller: string | undefined) => {
    const pkg = packageOf(n.callFrame.url)
    const here = pkg === "effect" || pkg === "node" || pkg === "(vm/native)" ? caller : key(n)
    if (n.selfSize > 0) {
      total += n.selfSize
      add(byPackage, pkg, n.selfSize)
      add(byFn, key(n), n.selfSize)
      add(byCaller, here ?? "(Effect runtime only)", n.selfSize)
    }
    for (const c of n.children) walk(c, here)
  }
  for (const f of files) walk((JSON.parse(fs.readFileSync(f, "utf8")) as { head: Node }).head, undefined)
  const rows = (m: Map<string, number>, k: number) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, k).map(([name, b]) => ({ name, bytes: Math.round(b / per), share: +(b / total).toFixed(3) }))
  return { bytes: Math.round(total / per), byPackage: rows(byPackage, 20), byFunction: rows(byFn, top), byCaller: rows(byCaller, top) }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2)
  const per = Number(args.find((a) => a.startsWith("--per="))?.slice(6) ?? 1)
  const top = Number(args.find((a) => a.startsWith("--top="))?.slice(6) ?? 25)
  console.log(JSON.stringify(summarize(args.filter((a) => !a.startsWith("--")), per, top), null, 1))
}
