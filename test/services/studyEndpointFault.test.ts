/**
 * A trial whose every failure is the model endpoint's fault (a key refused, a model or path it
 * does not know, an endpoint that cannot be called as configured) is not a result of its
 * variant: it settles `incomplete` with the faults in its reason, never enters a comparison,
 * and `resume` runs its failed pipelines again (issue 16, tester16 F7 second half).
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as http from "node:http"
import type * as net from "node:net"
import { endpointFaultOf } from "../../src/domain/internal/endpointFault.js"
import { FatalError } from "../../src/domain/Errors.js"
import * as Study from "../../src/services/Study.js"
import { StudyCatalog } from "../../src/services/StudyCatalog.js"
import { ChatError, chatClientFactory, clientOf } from "../../src/tasks/internal/chat.js"
import { makeStudy, studyEnv } from "./studyFixture.js"

/** A server answering every request with `status` and `body`. */
const rawServer = (status: number, body: string) =>
  Effect.acquireRelease(
    Effect.async<http.Server>((resume) => {
      const server = http.createServer((_req, res) => {
        res.writeHead(status, { "content-type": "application/json" })
        res.end(body)
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  ).pipe(Effect.map((server) => `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/v1`))

/** The failure the chat client gives for one call to `baseUrl`, as the store keeps it. */
const storedFailure = (options: Record<string, unknown>) =>
  Effect.gen(function*() {
    const r = yield* Effect.either(Effect.flatMap(
      chatClientFactory()({ id: "ep", kind: "openai", capacity: 1, options } as never),
      (client) => client.complete({ messages: [{ role: "user", content: "hi" }] })
    ))
    assert.isTrue(Either.isLeft(r))
    const e = (r as Either.Left<ChatError, unknown>).left
    return { errorType: e._tag, errorMessage: e.message }
  })

describe("endpointFaultOf reads the chat client's own failures", () => {
  const error = (code: string, message: string) => JSON.stringify({ error: { message, code } })
  const cases: ReadonlyArray<readonly [number, string, string | undefined]> = [
    [401, error("invalid_api_key", "bad key"), "401"],
    [403, error("forbidden", "no access"), "403"],
    [404, error("model_not_found", "The model \"nosuch\" does not exist"), "404"],
    // an error object in a 2xx body, with the status as its code
    [200, JSON.stringify({ error: { message: "bad key", code: 401 } }), "401"],
    // the variant's or the run's outcome, not the endpoint's fault
    [400, error("context_length_exceeded", "too long"), undefined],
    [500, error("server_error", "oops"), undefined],
    [429, error("rate_limited", "slow down"), undefined]
  ]
  for (const [status, body, what] of cases) {
    it.scopedLive(`HTTP ${status} -> ${what ?? "not an endpoint fault"}`, () =>
      Effect.gen(function*() {
        const baseUrl = yield* rawServer(status, body)
        const failure = yield* storedFailure({ baseUrl, apiKey: "k", model: "m" })
        const fault = endpointFaultOf(failure)
        assert.deepStrictEqual(fault, what === undefined ? undefined : { resourceId: "ep", what }, failure.errorMessage)
      }).pipe(Effect.provide(NodeContext.layer)))
  }

  it.effect("an endpoint that cannot be called as configured (its key's variable unset) is a configuration fault", () =>
    Effect.gen(function*() {
      // what the chat and judge tasks fail with (`clientOf` of their lease)
      const e = yield* Effect.flip(clientOf({
        resource: { id: "ep", kind: "openai", capacity: 1, options: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "ASSAY_F16R_NO_SUCH_KEY", model: "m" } },
        client: null
      } as never))
      const failure = { errorType: e._tag, errorMessage: e.message }
      const fault = endpointFaultOf(failure)
      assert.strictEqual(fault?.resourceId, "ep")
      assert.include(fault?.what ?? "", "a configuration fault")
      assert.include(fault?.what ?? "", "ASSAY_F16R_NO_SUCH_KEY")
    }).pipe(Effect.provide(NodeContext.layer)))

  it("another task's failure is never an endpoint fault, whatever its words", () => {
    assert.isUndefined(endpointFaultOf({ errorType: "FatalError", errorMessage: "ep: HTTP 401: bad key" }))
    assert.isUndefined(endpointFaultOf({ errorType: "ChatError", errorMessage: null }))
  })
})

const facts = (over: Partial<Study.TrialFacts>): Study.TrialFacts => ({
  admitted: 4,
  sourceExhausted: true,
  sourceError: null,
  byState: { succeeded: 1, failed: 3 },
  metrics: { accuracy: 0 },
  budgetSpent: null,
  stop: null,
  planned: 4,
  ...over
})
const objectives: ReadonlyArray<Study.StudyObjective> = [{ metric: "accuracy", direction: "maximize" }]
const fault401 = { resourceId: "a", what: "401" }

describe("settleTrial / settleStudy: endpoint faults", () => {
  it("every failure an endpoint fault: incomplete (resumable), not a result; the reason names the faults", () => {
    const s = Study.settleTrial(facts({ endpointFaults: [fault401, fault401, { resourceId: "b", what: "404" }] }), objectives)
    assert.strictEqual(s.status, "incomplete")
    assert.strictEqual(
      s.reason,
      "every failure was an endpoint fault: 401 on resource a for 2 pipelines; 404 on resource b for 1 pipeline; 1 of 4 pipelines succeeded; " +
        "fix the endpoint, then resume runs its failed pipelines again"
    )
    assert.isFalse(Study.isEligible(s.status))
    // the summary prints a reason in parentheses: none of its own
    assert.notMatch(s.reason, /[()]/)
  })

  it("a mix of real failures and endpoint faults: failed (a real failure is a result), the reason counts the faults", () => {
    const s = Study.settleTrial(facts({ endpointFaults: [fault401] }), objectives)
    assert.strictEqual(s.status, "failed")
    assert.strictEqual(s.reason, "3 pipelines failed, 1 of them by an endpoint fault: 401 on resource a for 1 pipeline")
  })

  it("a study with a trial left incomplete by endpoint faults is inconclusive, whatever the others did", () => {
    const t = (status: Study.TrialReport["status"], endpointFault = false) => ({ status, metrics: { accuracy: 0.9 }, brokeConstraint: false, endpointFault })
    const s = Study.settleStudy({ trials: [t("succeeded"), t("incomplete", true)], stoppedEarly: false, interrupted: false }, objectives)
    assert.strictEqual(s.status, "inconclusive")
    assert.include(s.reason, "1 of 2 trials not settled: every failure of it was an endpoint fault (fix the endpoint, then resume runs it again); 1 of 2 trials succeeded")
  })
})

describe("a study whose endpoint refused its calls", () => {
  it.effect("settles the trial incomplete, compares nothing of it, and resume runs its failed pipelines again (each case once more, none double counted)", () =>
    Effect.gen(function*() {
      let down = true
      const { executions, study } = makeStudy({
        qualities: ["good", "good"],
        repeats: 1,
        cases: 3,
        // v02's endpoint refuses its key on two cases; v01 has a real failure on one case besides
        fault: (trialId, n) =>
          !down ? undefined
          : trialId === "p1-v02-r1" && n > 0 ? new ChatError({ message: "a: HTTP 401: invalid key", errorClass: "fatal", status: 401, resourceId: "a" })
          : trialId === "p1-v01-r1" && n === 2 ? new FatalError({ message: "the task's own failure" })
          : trialId === "p1-v01-r1" && n === 1 ? new ChatError({ message: "a: HTTP 401: invalid key", errorClass: "fatal", status: 401, resourceId: "a" })
          : undefined
      })
      const first = yield* Study.run(study)
      const byTrial = new Map(first.trials.map((t) => [t.trialId, t]))
      assert.strictEqual(byTrial.get("p1-v02-r1")!.status, "incomplete")
      assert.include(byTrial.get("p1-v02-r1")!.reason, "every failure was an endpoint fault: 401 on resource a for 2 pipelines")
      // a real failure among them: a result of its variant
      assert.strictEqual(byTrial.get("p1-v01-r1")!.status, "failed")
      assert.include(byTrial.get("p1-v01-r1")!.reason, "2 pipelines failed, 1 of them by an endpoint fault")
      assert.strictEqual(first.status, "inconclusive")
      assert.notInclude(first.eligible, "p1-v02-r1")
      // the endpoint fixed: resume runs the incomplete trial's failed pipelines only; the failed trial stays
      down = false
      const second = yield* Study.run(study, { resume: true })
      const after = new Map(second.trials.map((t) => [t.trialId, t]))
      assert.strictEqual(after.get("p1-v02-r1")!.status, "succeeded")
      assert.deepStrictEqual(after.get("p1-v02-r1")!.byState, { succeeded: 3 })
      assert.strictEqual(after.get("p1-v01-r1")!.status, "failed")
      assert.isFalse(after.get("p1-v01-r1")!.ran)
      // the case that succeeded is not run again; each refused case runs once more
      assert.strictEqual(executions.get("p1-v02-r1/0"), 1)
      assert.strictEqual(executions.get("p1-v02-r1/1"), 2)
      assert.strictEqual(executions.get("p1-v02-r1/2"), 2)
      assert.strictEqual(executions.get("p1-v01-r1/1"), 1)
      assert.deepStrictEqual(second.eligible, ["p1-v02-r1"])
      const stored = yield* Effect.flatMap(StudyCatalog, (c) => c.trials("demo", 1))
      assert.strictEqual(stored.find((t) => t.trialId === "p1-v02-r1")!.status, "succeeded")
    }).pipe(Effect.provide(studyEnv("demo"))))
})
