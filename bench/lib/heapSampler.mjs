// Samples a process's allocations with V8's sampling heap profiler (through the inspector, in the
// process itself) and writes the profile (`.heapprofile`, Chrome DevTools' format) when the process
// exits: `node --import ./bench/lib/heapSampler.mjs …`, e.g. for the cluster bench's runners through
// `BENCH_CLUSTER_RUNNER_NODE_ARGS` (BENCHMARKS.md gen17am).
//
// Unlike `node --heap-prof` (the objects still alive at the end), this can keep the samples of the
// objects the garbage collector has since freed:
// - `BENCH_HEAP_SAMPLE=all`: every allocation (freed by a scavenge or by a mark-compact, or live):
//   what the process allocates, by allocation site;
// - `BENCH_HEAP_SAMPLE=old` (default): the objects a mark-compact freed, and the live ones, not
//   those a scavenge freed: the objects that survived the young generation (promoted: copied by
//   the scavenges, then marked and swept in the old one), by allocation site;
// - `BENCH_HEAP_SAMPLE=live`: the objects still alive at the end (as `node --heap-prof`).
// `BENCH_HEAP_SAMPLE_DIR` (default the working directory) receives `heap-<pid>-<mode>.heapprofile`;
// `BENCH_HEAP_SAMPLE_INTERVAL` (bytes, default 16384) is the mean sampling interval.
// `npx tsx bench/lib/heapprofile.ts --per=TASKS FILE…` summarizes them (BENCHMARKS.md gen17am).
import * as fs from "node:fs"
import * as inspector from "node:inspector"
import * as path from "node:path"

const mode = process.env.BENCH_HEAP_SAMPLE ?? "old"
const dir = process.env.BENCH_HEAP_SAMPLE_DIR ?? process.cwd()
const interval = Number(process.env.BENCH_HEAP_SAMPLE_INTERVAL ?? 16384)
const session = new inspector.Session()
session.connect()
session.post("HeapProfiler.startSampling", {
  samplingInterval: interval,
  includeObjectsCollectedByMajorGC: mode === "all" || mode === "old",
  includeObjectsCollectedByMinorGC: mode === "all"
})
process.once("exit", () => {
  // a session connected in the same thread answers synchronously
  session.post("HeapProfiler.stopSampling", (error, result) => {
    if (error) return process.stderr.write(`heapSampler: ${error.message}\n`)
    fs.mkdirSync(dir, { recursive: true })
    fs.writeFileSync(path.join(dir, `heap-${process.pid}-${mode}.heapprofile`), JSON.stringify(result.profile))
  })
})
