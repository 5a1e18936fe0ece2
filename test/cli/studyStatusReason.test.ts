/**
 * `study status`'s reason of a trial (src/cli/StudyRun.ts `statusReason`): a trial not settled
 * never shows a reason an earlier settlement stored (tester16 F10.8: after a Ctrl-C run and a
 * resume killed with -9, status --json said `"state":"interrupted","reason":"never started:
 * SIGINT received"`).
 */
import { assert, describe, it } from "@effect/vitest"
import { statusReason } from "../../src/cli/StudyRun.js"

describe("study status: a trial's reason", () => {
  it("a running trial left by a dead process: its own reason, not the earlier run's 'never started'", () => {
    const stale = { status: "running", reason: "never started: SIGINT received" }
    assert.strictEqual(statusReason(stale, "interrupted"), "interrupted: the process running it ended before settling it; resume continues it")
    // live: nothing to say yet
    assert.isNull(statusReason(stale, "running"))
    assert.isNull(statusReason({ status: "pending", reason: "never started: SIGINT received" }, "pending"))
  })

  it("a settled trial keeps its reason", () => {
    assert.strictEqual(statusReason({ status: "failed", reason: "1 pipeline failed" }, "failed"), "1 pipeline failed")
    assert.strictEqual(statusReason({ status: "not_started", reason: "never started: SIGINT received" }, "not_started"), "never started: SIGINT received")
  })
})
