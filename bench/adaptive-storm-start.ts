/**
 * Issue 18 F4: how fast `adaptive` reaches the limit after a 429 storm (Retry-After 12 s), when
 * the storm meets a state that has learned something (a fresh run, 2.5 s into slow start)
 * against one that has not (a resume whose saved state held nothing yet: it starts at the
 * conservative start inside the storm). The model is `test/support/storm-start.ts` (simulated
 * time). Prints one JSON line per case: `reach_s` (seconds from the end of the throttle until a
 * 1 s window of answers reaches 90 % of the limit of 20 requests/s), `rate_5s_after`, `knee`.
 *
 * Run: `npx tsx bench/adaptive-storm-start.ts`
 */
import { stormRecovery } from "../test/support/storm-start.js"

const one = (name: string, stormFromMs: number, stormToMs: number) => {
  const r = stormRecovery(stormFromMs, stormToMs)
  console.log(JSON.stringify({ case: name, throttle_end_s: r.throttleEndS, reach_s: r.reachS, rate_5s_after: r.rate5sAfter, knee: r.knee }))
}

one("fresh run, storm 2.5 s in", 2500, 5500)
one("resume with nothing learned, storm at once", 0, 3000)
