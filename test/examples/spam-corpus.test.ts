import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Stream } from "effect"
import * as fs from "node:fs"
import * as NodePath from "node:path"
import {
  buildPrompt,
  corpusDirectory,
  htmlToText,
  loadCorpus,
  loadIndex,
  parseEmail,
  parseLabel,
  readRecord,
  sampleStratified,
  streamCorpus
} from "../../examples/spam-eval/corpus.js"
import { classify } from "../../src/domain/Errors.js"
import { decodeProfile, serve } from "../../src/services/MockLlm.js"

const expectedGroups = { "easy-ham-1": 2500, "easy-ham-2": 1400, "hard-ham-1": 250, "spam-1": 500, "spam-2": 1396 }

const countBy = <A>(xs: ReadonlyArray<A>, f: (a: A) => string) => {
  const out: Record<string, number> = {}
  for (const x of xs) out[f(x)] = (out[f(x)] ?? 0) + 1
  return out
}

const byIdIn = <A extends { readonly id: string }>(entries: ReadonlyArray<A>, id: string): A => {
  const e = entries.find((x) => x.id === id)
  if (e === undefined) throw new Error(`no corpus entry ${id}`)
  return e
}

describe("SpamAssassin corpus", () => {
  it.effect("index: counts per group and label, checked against the package's own files", () =>
    Effect.gen(function*() {
      const index = yield* loadIndex
      assert.deepStrictEqual(countBy(index, (e) => e.group), expectedGroups)
      assert.deepStrictEqual(countBy(index, (e) => e.label), { ham: 4150, spam: 1896 })
      assert.deepStrictEqual(countBy(index, (e) => e.subset), { easy_ham: 3900, hard_ham: 250, spam: 1896 })
      assert.strictEqual(new Set(index.map((e) => e.id)).size, 6046)
      // the package holds 12,092 data files: one .txt and one .json per email
      const dir = yield* corpusDirectory
      let files = 0
      for (const g of Object.keys(expectedGroups)) files += fs.readdirSync(NodePath.join(dir, g)).length
      assert.strictEqual(files, 12_092)
      const dataJs = fs.readFileSync(NodePath.join(dir, "data.js"), "utf8")
      assert.include(dataJs, "new Array( 6046 )")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("a record's raw text is the email file, with headers", () =>
    Effect.gen(function*() {
      const index = yield* loadIndex
      const r = yield* readRecord(byIdIn(index, "spam-1/00001"))
      assert.strictEqual(r.label, "spam")
      assert.strictEqual(r.group, "spam-1")
      assert.match(r.raw, /^From 12a1mailbot1@web\.de/)
      assert.include(r.raw, "Subject: Life Insurance - Why Pay More?")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("stratified sample: exact group shares, deterministic, seed-dependent, nested by size", () =>
    Effect.gen(function*() {
      const index = yield* loadIndex
      const s1 = sampleStratified(index, { size: 300, seed: 1 })
      assert.strictEqual(s1.length, 300)
      const counts = countBy(s1, (e) => e.group)
      for (const [g, n] of Object.entries(expectedGroups)) {
        const exact = (n * 300) / 6046
        assert.isAtLeast(counts[g] ?? 0, Math.floor(exact), g)
        assert.isAtMost(counts[g] ?? 0, Math.ceil(exact), g)
      }
      const spamShare = s1.filter((e) => e.label === "spam").length / 300
      assert.closeTo(spamShare, 1896 / 6046, 1 / 300 + 1e-9)
      assert.deepStrictEqual(sampleStratified(index, { size: 300, seed: 1 }).map((e) => e.id), s1.map((e) => e.id))
      const s2 = sampleStratified(index, { size: 300, seed: 2 })
      assert.notDeepEqual(s2.map((e) => e.id), s1.map((e) => e.id))
      const big = new Set(sampleStratified(index, { size: 600, seed: 1 }).map((e) => e.id))
      assert.isTrue(s1.every((e) => big.has(e.id)))
      assert.strictEqual(new Set(s1.map((e) => e.id)).size, 300)
      // labels come mixed, not grouped
      assert.notDeepEqual(s1.slice(0, 50).map((e) => e.label), Array(50).fill("ham"))
      assert.strictEqual(sampleStratified(index).length, 1000)
      assert.strictEqual(sampleStratified(index, { size: 10_000 }).length, 6046)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("loadCorpus reads only the sample; streamCorpus gives the same records", () =>
    Effect.gen(function*() {
      const sample = { size: 40, seed: 9 }
      const loaded = yield* loadCorpus({ sample })
      assert.strictEqual(loaded.length, 40)
      assert.isTrue(loaded.every((r) => r.raw.length > 0))
      const streamed = yield* Stream.runCollect(streamCorpus({ sample }))
      assert.deepStrictEqual(Array.from(streamed).map((r) => r.id), loaded.map((r) => r.id))
      const hard = yield* loadCorpus({ groups: ["hard-ham-1"], sample: { size: 10 } })
      assert.isTrue(hard.every((r) => r.subset === "hard_ham" && r.label === "ham"))
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})

describe("MIME parsing and prompts", () => {
  it.effect("an HTML-only email: the body is the HTML converted to text", () =>
    Effect.gen(function*() {
      const r = yield* readRecord(byIdIn(yield* loadIndex, "spam-1/00001"))
      const p = yield* parseEmail(r.raw)
      assert.strictEqual(p.subject, "Life Insurance - Why Pay More?")
      assert.strictEqual(p.from, "12a1mailbot1@web.de")
      assert.isFalse(p.hasText)
      assert.isTrue(p.hasHtml)
      assert.include(p.text, "Save up to 70% on Life Insurance.")
      assert.notInclude(p.text, "<")
      assert.notInclude(p.text, "=3D")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect("a multipart/alternative email: the text/plain part is used", () =>
    Effect.gen(function*() {
      const r = yield* readRecord(byIdIn(yield* loadIndex, "easy-ham-1/00062"))
      assert.include(r.raw, "multipart/alternative")
      const p = yield* parseEmail(r.raw)
      assert.strictEqual(p.subject, "Tiny DNS Swap")
      assert.strictEqual(p.from, "Bob Musser <BobM@dbsinfo.com>")
      assert.isTrue(p.hasText)
      assert.isTrue(p.hasHtml)
      assert.match(p.text, /^I'm using Simple DNS from JHSoft\./)
      assert.notInclude(p.text, "<")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it("htmlToText drops scripts, styles and tags and decodes entities", () => {
    const t = htmlToText("<html><head><style>p{}</style></head><body><p>Tom &amp; Jerry&#33;</p><script>x()</script>A&nbsp;B<br>C&#x41;</body></html>")
    assert.strictEqual(t, "Tom & Jerry!\nA B\nCA")
  })

  it("buildPrompt: instruction, sender, subject, and the start of the body between markers", () => {
    const parsed = { subject: "Hello", from: "Ann <a@x.org>", text: "x".repeat(50), hasText: true, hasHtml: false }
    const prompt = buildPrompt(parsed, { maxBodyChars: 20 })
    const lines = prompt.split("\n")
    assert.include(lines[1]!, "Answer with exactly one word: spam or ham.")
    const start = lines.indexOf("--- email ---")
    assert.deepStrictEqual(lines.slice(start + 1, start + 5), ["From: Ann <a@x.org>", "Subject: Hello", "", `${"x".repeat(20)}…`])
    assert.strictEqual(lines.at(-1), "--- end of email ---")
    assert.notInclude(buildPrompt({ ...parsed, text: "short" }), "…")
  })
})

describe("parseLabel", () => {
  const ok = (text: string, label: "spam" | "ham") =>
    assert.deepStrictEqual(parseLabel(text), Either.right(label), text)

  it("reads the label from plain and noisy answers", () => {
    ok("spam", "spam")
    ok(" HAM. \n", "ham")
    ok("Label: SPAM", "spam")
    ok("I think this is ham.", "ham")
    ok("**spam**", "spam")
    ok("ham (confidence: high)", "ham")
    ok("Answer: ham", "ham")
    ok("classification = spam, not ham", "spam")
  })

  it("answers naming no label, or both without a prefix, are InvalidLabel of class invalid", () => {
    for (const text of ["I cannot tell from this message.", "", "spammy", "hamster", "not spam, ham", "spam or ham?"]) {
      const r = parseLabel(text)
      assert.isTrue(Either.isLeft(r), text)
      if (Either.isLeft(r)) {
        assert.strictEqual(r.left._tag, "InvalidLabel")
        assert.strictEqual(classify(r.left), "invalid")
        assert.include(r.left.message, "names no label")
      }
    }
    const long = parseLabel("x".repeat(1000))
    assert.isTrue(Either.isLeft(long) && long.left.answer.length === 200)
  })
})

describe("the mock server's scorer on the real corpus", () => {
  it.scopedLive("accuracy on a seeded sample of 300, through the server, is meaningful but imperfect", () =>
    Effect.gen(function*() {
      const records = yield* loadCorpus({ sample: { size: 300, seed: 42 } })
      const profile = yield* Effect.orDie(decodeProfile({ endpoints: [{ name: "m", latency: { medianMs: 0 } }] }))
      const server = yield* serve({ profile })
      let correct = 0
      const predicted = new Set<string>()
      yield* Effect.forEach(records, (r) =>
        Effect.gen(function*() {
          const prompt = buildPrompt(yield* parseEmail(r.raw))
          const answer = yield* Effect.promise(async () => {
            const res = await fetch(`${server.url}/v1/chat/completions`, {
              method: "POST",
              headers: { authorization: "Bearer eval", "content-type": "application/json" },
              body: JSON.stringify({ model: "m", messages: [{ role: "user", content: prompt }] })
            })
            return ((await res.json()) as any).choices[0].message.content as string
          })
          const label = Either.getOrThrow(parseLabel(answer))
          predicted.add(label)
          if (label === r.label) correct++
        }), { concurrency: 8, discard: true })
      const accuracy = correct / records.length
      assert.isAtLeast(accuracy, 0.6)
      assert.isAtMost(accuracy, 0.97)
      assert.deepStrictEqual([...predicted].sort(), ["ham", "spam"])
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})
