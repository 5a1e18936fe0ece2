/**
 * A preload (`node --require bench/lib/eventLoop.cjs …`, or in `NODE_OPTIONS`) that records how
 * late a process's event loop runs its timers and how busy the loop is, for the benches
 * (bench/cluster.ts `BENCH_CLUSTER_EVENT_LOOP=1` preloads it into each runner).
 *
 * Every second it appends one JSON line to the file named by `ASSAY_BENCH_EVENT_LOOP` (nothing
 * when unset): `t` (ms since the epoch), the event-loop delay over that second from Node's
 * `perf_hooks.monitorEventLoopDelay` (resolution 10 ms: how much later than due a 10 ms timer
 * ran; `mean`, `p50`, `p90`, `p99`, `max`, in ms), and `elu`, the event-loop utilization over
 * that second (`performance.eventLoopUtilization`: the share of wall time the loop was not
 * waiting in the poll phase; a process that is runnable but not given a core counts as busy,
 * so `elu` far above the process's CPU share means it waits for a core).
 *
 * Plain CommonJS with no dependencies so that `--require` loads it before anything else.
 */
"use strict"
const file = process.env.ASSAY_BENCH_EVENT_LOOP
if (file) {
  const { monitorEventLoopDelay, performance } = require("node:perf_hooks")
  const fs = require("node:fs")
  const histogram = monitorEventLoopDelay({ resolution: 10 })
  histogram.enable()
  let before = performance.eventLoopUtilization()
  const ms = (ns) => Math.round(ns / 1e4) / 100
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization()
    const elu = performance.eventLoopUtilization(now, before)
    before = now
    const line = {
      t: Date.now(),
      mean: ms(histogram.mean),
      p50: ms(histogram.percentile(50)),
      p90: ms(histogram.percentile(90)),
      p99: ms(histogram.percentile(99)),
      max: ms(histogram.max),
      elu: Math.round(elu.utilization * 1000) / 1000
    }
    histogram.reset()
    try {
      fs.appendFileSync(file, JSON.stringify(line) + "\n")
    } catch {
      // a bench's temporary directory already removed: nothing to record into
    }
  }, 1000)
  timer.unref()
}
