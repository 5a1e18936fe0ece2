/**
 * tester17ad F11: a duration assay prints (`Duration.format`: `2s`, `1m 30s`, `1s 500ms`) is
 * read back wherever a duration is read: the CLI's duration flags (`--stop-after`, the
 * runner's lease timing) and a file's duration fields (`run.stopAfter`, retry delays).
 */
import { assert, describe, it, expect } from "@effect/vitest"
import { Duration, Either, Option, Schema } from "effect"
import { durationFlag } from "../../src/cli/Flags.js"
import { decodeDurationText } from "../../src/domain/internal/durationText.js"
import { DurationFromString } from "../../src/domain/RetryPolicy.js"

const millis = (text: string) => Option.map(decodeDurationText(text), Duration.toMillis)

describe("duration text", () => {
  it("reads what Duration.format prints, as well as the word form", () => {
    for (const d of ["2 seconds", "90 seconds", "1500 millis", "3 days", "2 hours", "10 minutes", "500 millis"]) {
      const printed = Duration.format(Duration.decode(d as Duration.DurationInput))
      expect(millis(printed), printed).toStrictEqual(Option.some(Duration.toMillis(Duration.decode(d as Duration.DurationInput))))
    }
    expect(millis("2s")).toStrictEqual(Option.some(2000))
    expect(millis(" 1m 30s ")).toStrictEqual(Option.some(90_000))
    expect(millis("2ms")).toStrictEqual(Option.some(2))
    expect(millis("1.5s")).toStrictEqual(Option.some(1500))
    expect(millis("2 seconds")).toStrictEqual(Option.some(2000))
  })

  it("refuses a bare number, an unknown unit, and leftovers", () => {
    for (const t of ["2", "0.5", "2x", "2min", "2mss", "s", "", "2s x", "1.5ns"]) assert.isTrue(Option.isNone(decodeDurationText(t)), t)
  })

  it("--stop-after 2s and a file's \"30s\" are accepted; text that is no duration is still refused naming the flag", () => {
    const flag = durationFlag("stop-after", Option.some("2s"), { positive: true })
    assert.deepStrictEqual(Either.map(flag, (d) => d === undefined ? undefined : Duration.toMillis(d)), Either.right(2000))
    assert.strictEqual(Duration.toMillis(Schema.decodeUnknownSync(DurationFromString)("30s")), 30_000)
    const bad = durationFlag("stop-after", Option.some("soon"))
    assert.isTrue(Either.isLeft(bad) && bad.left.issues[0]!.path === "--stop-after")
  })
})
