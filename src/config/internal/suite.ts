/**
 * @internal
 *
 * Loading a suite file: the suite's own checks (ids, run, output, shared pools, bindings) and
 * each member loaded as the experiment it is (the same `read` + `check` as `Experiment.load`),
 * with every problem reported in one `ConfigError` at its field path.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as path from "node:path"
import { Effect, Either, Option, Schema } from "effect"
import { ConfigError, type ConfigIssue } from "../../domain/Errors.js"
import { canonicalJson, digest, type Json } from "../../domain/Json.js"
import * as Resource from "../../domain/Resource.js"
import * as RunConfig from "../../domain/RunConfig.js"
import * as Suite from "../../domain/Suite.js"
import * as Pool from "../../services/Pool.js"
import * as Chat from "../../tasks/internal/chat.js"
import * as Plugins from "../../layers/internal/plugins.js"
import * as StoreResolver from "../../layers/internal/storeResolver.js"
import type { ExperimentDefinition } from "../Config.js"
import type { Experiment, Format, LoadOptions } from "../Experiment.js"
import { buildPools, describeAlgorithm } from "./build.js"
import { check } from "./check.js"
import { expandEnv, hidingEnvValuesOf } from "./env.js"
import { closest, decodeIssues, failWith, isRecord, issue } from "./issues.js"
import * as parse from "./parse.js"
import { SuiteFile } from "./suiteSchema.js"

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/**
 * Options of {@link load}: those of `Experiment.load` (`strictEnv`, `env`, `scanKeys`, applied
 * to the suite file and to every member), plus `outputRoot`, which replaces `output.root` and
 * is relative to the working directory (the CLI's `--output-root`).
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteLoadOptions extends LoadOptions {
  readonly outputRoot?: string | undefined
  /**
   * The members a run selects (`--experiment`; default: all). A member left out whose file is
   * missing or unreadable is left out of the loaded suite with a warning instead of failing the
   * load, so the selected members still run (since 0.7.0).
   */
  readonly selected?: ReadonlyArray<string> | undefined
}

/**
 * One loaded member of a suite.
 *
 * - `id`: the member (experiment) id; `label`, `limit`, `stopAfterFailures`: as written (or
 *   `undefined`); `stopAfterFailures` is run configuration, outside the definition digest;
 * - `config`: the absolute path of its experiment file; `experiment`: that file loaded by the
 *   experiment loader, its paths keeping their standalone meaning;
 * - `memberDigest`: `SuiteIdentity.memberDigest(suiteId, id)` (the prefix of its pipeline ids);
 * - `definitionDigest`: the digest of what the member computes (see {@link definitionOf});
 * - `definitionParts`: that definition part by part ({@link definitionParts}), stored beside
 *   the digest so a refused change names what changed;
 * - `previousDigests`: the digests earlier builds gave the same definition
 *   ({@link previousDefinitionDigests}): a root registered with one of them is the same member;
 * - `poolAliases`: every pool the member declares, local name → actual name (a shared pool
 *   it is bound to, or its private `experiment:ID:NAME`);
 * - `ignoredRunFields`: the fields of its own `run` block (validated, not applied);
 * - `outputDir`: the absolute directory its files go to (the root for `combined`,
 *   `ROOT/experiments/ID` for `byExperiment`);
 * - `variables`: a study trial's variable values (name → JSON), seen by its tasks as
 *   `ctx.variables`; absent for a suite file's members.
 *
 * @since 0.5.0
 * @category models
 */
export interface LoadedMember {
  readonly id: string
  readonly label: string | undefined
  readonly limit: number | undefined
  readonly stopAfterFailures?: number | undefined
  readonly config: string
  readonly experiment: Experiment
  readonly memberDigest: string
  readonly definitionDigest: string
  readonly definitionParts: Readonly<Record<string, string>>
  readonly previousDigests: ReadonlyArray<string>
  readonly poolAliases: Readonly<Record<string, string>>
  readonly ignoredRunFields: ReadonlyArray<string>
  readonly outputDir: string
  readonly variables?: Readonly<Record<string, Json>> | undefined
}

/**
 * A member a run leaves out because it does not select it and its experiment file could not be
 * loaded: its id, label and problems (one line each, `experiments.ID.config: …`).
 *
 * @since 0.8.0
 * @category models
 */
export interface LeftOutMember {
  readonly id: string
  readonly label: string | null
  readonly problems: ReadonlyArray<string>
}

/**
 * A loaded, checked suite.
 *
 * - `id`, `file`, `format`, `baseDir`: the suite and where its file is;
 * - `run`: the suite's run settings (`RunConfigInput`, no `store`);
 * - `output`: the absolute `root` and the `layout`;
 * - `pools`: every pool of the run: the top-level (shared) pools, then each member's private
 *   `experiment:ID:NAME` pools;
 * - `sharedPools`: the names of the top-level pools;
 * - `members`: in file order (the round-robin order);
 * - `plugins`: the members' plugins merged (the first member listing a name wins);
 * - `unresolvedEnv`: the suite file's `${VAR}` without a value; `warnings`: one line each
 *   (the members' source warnings, shared pools no member binds, members left out);
 * - `leftOut`: the members a run does not select whose experiment file could not be loaded
 *   (missing, unreadable, invalid), in file order, each with its label and its problems (one
 *   line each, `experiments.ID.config: …`): not in `members`, but listed by the run's summary
 *   (since 0.8.0);
 * - `describe()`: the JSON `assay validate` prints: ignored run fields, effective overrides
 *   and the pool mapping of each member.
 *
 * @since 0.5.0
 * @category models
 */
export interface LoadedSuite {
  readonly id: string
  readonly file: string
  readonly format: Format
  readonly baseDir: string
  readonly run: RunConfig.RunConfigInput
  readonly output: { readonly root: string; readonly layout: Suite.SuiteLayout }
  readonly pools: ReadonlyArray<Pool.PoolConfig>
  readonly sharedPools: ReadonlyArray<string>
  readonly members: ReadonlyArray<LoadedMember>
  readonly plugins: Plugins.PluginRegistry
  readonly unresolvedEnv: ReadonlyArray<{ readonly name: string; readonly path: string }>
  readonly warnings: ReadonlyArray<string>
  readonly leftOut?: ReadonlyArray<LeftOutMember> | undefined
  readonly describe: () => Json
}

// ---------------------------------------------------------------------------------------------
// Definition digest
// ---------------------------------------------------------------------------------------------

/**
 * The format marker of {@link definitionDigest}; bumping it changes every member's digest
 * (keep the older digests in {@link previousDefinitionDigests}, so existing roots still match).
 * v2 (0.6.0): pools are digested without their run configuration ({@link POOL_RUN_FIELDS}).
 *
 * @since 0.5.0
 * @category identity
 */
export const DEFINITION_FORMAT = "assay-suite-definition-v2"

/** The format of the first digests: pools with their run configuration. */
const DEFINITION_FORMAT_V1 = "assay-suite-definition-v1"

/**
 * The fields of a pool declaration (at the pool level and on each resource) that are run
 * configuration, not identity: how many leases at once (`capacity`), when a resource is
 * marked degraded or dead and how long it cools down (`degradeAfter`, `deadAfter`,
 * `cooldown`), and when a wait is reported as a possible deadlock (`deadlockWarn`). Changing
 * them changes how fast and how politely a member runs, never what it computes, so they are
 * left out of the definition digest: a resume may raise or lower a shared pool's capacity.
 *
 * @since 0.6.0
 * @category identity
 */
export const POOL_RUN_FIELDS: ReadonlyArray<string> = ["capacity", "degradeAfter", "deadAfter", "cooldown", "deadlockWarn"]

/** A pool declaration without its run configuration ({@link POOL_RUN_FIELDS}). Also used by the study loader. */
export const poolIdentity = (declaration: Json): Json => {
  const strip = (u: Json): Json => {
    if (u === null || typeof u !== "object" || Array.isArray(u)) return u
    const out: Record<string, Json> = {}
    for (const [k, v] of Object.entries(u)) if (!POOL_RUN_FIELDS.includes(k)) out[k] = v
    return out
  }
  if (declaration === null || typeof declaration !== "object" || Array.isArray(declaration)) return declaration
  const pool = strip(declaration) as Record<string, Json>
  const resources = pool["resources"]
  return Array.isArray(resources) ? { ...pool, resources: resources.map(strip) } : pool
}

/** The definition with each pool declaration reduced to its identity. */
const identityOf = (definition: MemberDefinition): MemberDefinition => ({
  ...definition,
  pools: Object.fromEntries(
    Object.entries(definition.pools).map(([n, p]) => [n, { ...p, declaration: poolIdentity(p.declaration) }])
  )
})

/** A parsed value as plain JSON (dates as ISO strings, functions dropped). Also used by the study loader. */
export const plain = (u: unknown): Json => {
  if (u === undefined) return null
  try {
    return JSON.parse(JSON.stringify(u, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v))) as Json
  } catch {
    return String(u)
  }
}

/**
 * What a member's definition digest covers (see {@link definitionDigest}):
 *
 * - `task`: the template's `specDigest` (the task fingerprints, and the control block);
 * - `source`: the member's `source` section (after `${VAR}` expansion, paths as written);
 * - `pools`: for each local pool name (sorted), `{ bound, declaration }` for a pool bound to a
 *   shared pool (the shared pool's declaration) or `{ declaration }` for a private one, every
 *   declaration as written **before** `${VAR}` expansion (the digest leaves out its run
 *   configuration, {@link POOL_RUN_FIELDS});
 * - `limit`: the member's limit, or `null`.
 *
 * Not covered: the label, the member's order and its `run` block (not applied).
 *
 * @since 0.5.0
 * @category identity
 */
export interface MemberDefinition {
  readonly task: string
  readonly source: Json
  readonly pools: Readonly<Record<string, { readonly bound?: string; readonly declaration: Json }>>
  readonly limit: number | null
}

/**
 * The definition digest of a member: `Json.digest` (32 hex) of the canonical JSON
 * `["assay-suite-definition-v2", definition]` (see {@link MemberDefinition}), its pools without
 * their run configuration ({@link POOL_RUN_FIELDS}). Rotating a key held in `${API_KEY}`
 * changes nothing (pools are digested before expansion), nor does a pool's capacity; a
 * literal change of a pool's resources, algorithm or kind, a binding or the limit changes it.
 *
 * @since 0.5.0
 * @category identity
 */
export const definitionDigest = (definition: MemberDefinition): string =>
  digest(Either.getOrThrow(canonicalJson([DEFINITION_FORMAT, identityOf(definition)])))

/**
 * The digests earlier formats gave the same definition: v1 (pools with their run
 * configuration). A root registered with one of them holds this member, and is upgraded to
 * {@link definitionDigest} when a run registers it.
 *
 * @param definition what the digest covers (see {@link MemberDefinition})
 * @returns the older digests, oldest first
 * @since 0.6.0
 * @category identity
 */
export const previousDefinitionDigests = (definition: MemberDefinition): ReadonlyArray<string> => [
  digest(Either.getOrThrow(canonicalJson([DEFINITION_FORMAT_V1, definition])))
]

/** The first 12 hex characters of a JSON value's digest (a part too long or too private to show). */
const shortDigest = (u: Json): string => digest(Either.getOrThrow(canonicalJson(u))).slice(0, 12)

/** The most field leaves recorded per section (a larger section is compared as a whole). */
const MAX_LEAVES = 64

/**
 * The leaves of a JSON value (`prefix.key`, `prefix[i]`) with a 12-character digest of each
 * value, or `{}` when there are more than {@link MAX_LEAVES}. An empty object or array is a leaf.
 */
const leavesOf = (prefix: string, u: Json): Record<string, string> => {
  const out: Record<string, string> = {}
  let n = 0
  const walk = (p: string, v: Json): boolean => {
    if (Array.isArray(v) && v.length > 0) return v.every((x, i) => walk(`${p}[${i}]`, x))
    if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length > 0) {
      return Object.keys(v).sort().every((k) => walk(`${p}.${k}`, (v as Record<string, Json>)[k]!))
    }
    if (++n > MAX_LEAVES) return false
    out[p] = shortDigest(v)
    return true
  }
  return walk(prefix, u) ? out : {}
}

/**
 * The prefix of the field leaves among a member's definition parts (`field:source.range.n`):
 * they name the fields of a changed section, and are compared only to describe a change.
 *
 * @since 0.5.0
 * @category identity
 */
export const FIELD_PART = "field:"

/**
 * A member's definition part by part, as the catalog stores it beside the digest: `tasks` (the
 * first 12 characters of the template's spec digest), `source` (a 12-character digest of the
 * source section), `limit` (the number, or `none`), and for each local pool `bindings.NAME`
 * (the shared pool it is bound to, or `(private)`) and `pools.NAME` (a 12-character digest of
 * the declaration as written, without its run configuration). Beside them, `field:source.PATH` and `field:pools.NAME.PATH`
 * give a 12-character digest of each field of the source section and of each pool declaration
 * (up to 64 per section), so that a refused change can name the fields that changed. Values
 * are shown, never secrets: sections and fields that may hold literal values are digested.
 *
 * @param definition what the digest covers (see {@link MemberDefinition})
 * @returns part name -> value
 * @since 0.5.0
 * @category identity
 */
export const definitionParts = (full: MemberDefinition): Readonly<Record<string, string>> => {
  const definition = identityOf(full)
  const parts: Record<string, string> = {
    tasks: definition.task.slice(0, 12),
    source: shortDigest(definition.source),
    limit: definition.limit === null ? "none" : String(definition.limit)
  }
  for (const [k, v] of Object.entries(leavesOf("source", definition.source))) parts[`${FIELD_PART}${k}`] = v
  for (const [name, p] of Object.entries(definition.pools)) {
    parts[`bindings.${name}`] = p.bound ?? "(private)"
    parts[`pools.${name}`] = shortDigest(p.declaration)
    for (const [k, v] of Object.entries(leavesOf(`pools.${name}`, p.declaration))) parts[`${FIELD_PART}${k}`] = v
  }
  return parts
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

const invalid = (file: string, all: ReadonlyArray<ConfigIssue>): ConfigError => failWith(file, all, "suite")

/** `did you mean x?`, or the list to choose from, or a hint to declare one. */
const choose = (name: string, among: ReadonlyArray<string>, none: string): string => {
  const near = closest(name, among)
  return near !== undefined ? `did you mean ${near}?` : among.length > 0 ? `one of: ${among.join(", ")}` : none
}

/**
 * Whether a file is a suite file: it parses (by suffix, as an experiment file would) and its
 * document has a top-level `suite`. Never fails: a file that cannot be read or parsed is not a
 * suite file (loading it as an experiment then reports why).
 *
 * @since 0.5.0
 * @category loading
 */
export const isSuiteFile = (file: string): Effect.Effect<boolean, never, FileSystem.FileSystem> =>
  parse.hasTopLevelKey(file, "suite")

interface Entry {
  readonly id: string
  readonly config: string
  readonly poolBindings: Readonly<Record<string, string>>
  readonly label: string | undefined
  readonly limit: number | undefined
  readonly stopAfterFailures: number | undefined
}

/** The member entries of a (possibly invalid) expanded suite document, as far as they read. */
const entriesOf = (doc: unknown): Array<Entry> => {
  const experiments = isRecord(doc) ? doc["experiments"] : undefined
  if (!isRecord(experiments)) return []
  const out: Array<Entry> = []
  for (const [id, m] of Object.entries(experiments)) {
    if (!isRecord(m) || typeof m["config"] !== "string" || m["config"] === "") continue
    const bindings: Record<string, string> = {}
    if (isRecord(m["poolBindings"])) {
      for (const [k, v] of Object.entries(m["poolBindings"])) if (typeof v === "string") bindings[k] = v
    }
    out.push({
      id,
      config: m["config"],
      poolBindings: bindings,
      label: typeof m["label"] === "string" ? m["label"] : undefined,
      limit: typeof m["limit"] === "number" && Number.isSafeInteger(m["limit"]) && m["limit"] >= 0 ? m["limit"] : undefined,
      stopAfterFailures: typeof m["stopAfterFailures"] === "number" && Number.isSafeInteger(m["stopAfterFailures"]) &&
          m["stopAfterFailures"] >= 1
        ? m["stopAfterFailures"]
        : undefined
    })
  }
  return out
}

/** A member's problems, re-pathed under `experiments.ID.config` and naming the member's file. */
const memberIssues = (id: string, file: string, baseDir: string, e: ConfigError): Array<ConfigIssue> => {
  const rel = path.relative(baseDir, file) || file
  const at = Suite.memberPath(id, ".config")
  const issues = e.issues.length > 0 ? e.issues : [{ path: "", message: e.message }]
  return issues.map((i) =>
    issue(
      at,
      // a problem of the file as a whole (missing, unreadable) is said of the file; a field's names its path in it
      i.line !== undefined ? i.message : i.path === "" ? `${rel}: ${i.message}` : `${rel}: ${i.path}: ${i.message}`,
      i.suggestion
    )
  )
}

/**
 * Loads and checks a suite file (`.json`, `.toml`, `.yaml`/`.yml`, or a `.ts`/`.mts`/`.js`/
 * `.mjs` module whose default export is `defineSuite({...})`), and every member's experiment
 * file with the experiment loader. Fails with one `ConfigError` listing every problem with its
 * field path (`experiments.baseline.poolBindings.apis`); a member's own problems are listed
 * under `experiments.ID.config` with the member's file and field path.
 *
 * @since 0.5.0
 * @category loading
 */
export const load = (
  file: string,
  options: SuiteLoadOptions = {}
): Effect.Effect<LoadedSuite, ConfigError, FileSystem.FileSystem> =>
  // the strings that took a value from `${VAR}` are hidden again in any problem it fails with
  hidingEnvValuesOf(options.env ?? process.env, (interpolated) =>
  Effect.gen(function*() {
    const abs = path.resolve(file)
    if (parse.formatOf(abs) === undefined) {
      return yield* invalid(abs, [issue("", `unknown suite format "${path.extname(abs)}"`, "use .json, .toml, .yaml/.yml or .ts")])
    }
    // the reader's refusals name the file as a suite's (a syntax error keeps its compiler style)
    const read = yield* Effect.mapError(
      parse.read(abs),
      (e) => (e.issues.some((i) => i.line !== undefined) || e.issues.length === 0 ? e : invalid(abs, e.issues))
    )
    const { baseDir, format } = read
    const env = options.env ?? process.env
    const strictEnv = options.strictEnv === true
    const issues: Array<ConfigIssue> = [...(read.literalIssues ?? [])]
    const warnings: Array<string> = []
    const leftOut: Array<LeftOutMember> = []

    // ${VAR} expansion (the raw document is kept: pools are digested before expansion)
    const unresolved: Array<{ name: string; path: string }> = []
    const emptyEnv: Array<{ name: string; path: string }> = []
    const doc = expandEnv(read.raw, env, unresolved, [], emptyEnv, interpolated)
    if (strictEnv) {
      for (const u of unresolved) {
        issues.push(issue(u.path, `environment variable ${u.name} is not set (--strict-env)`, `export ${u.name}=... or write \${${u.name}:-default}`))
      }
      for (const u of emptyEnv) {
        issues.push(issue(u.path, `environment variable ${u.name} is set but empty (--strict-env)`, `export ${u.name}=... with a value, or write \${${u.name}:-default}`))
      }
    }

    // the Schema: every shape problem at once; a lenient decode lets the other checks run
    if (!isRecord(doc)) return yield* invalid(abs, [issue("", "a suite file is an object with suite, output and experiments")])
    // run.store is refused below with its reason, not as an unknown key
    const rawRun = isRecord(doc["run"]) ? doc["run"] : undefined
    const { store: runStore, ...runRest } = rawRun ?? {}
    const shaped = rawRun === undefined ? doc : { ...doc, run: runRest }
    const strict = Schema.decodeUnknownEither(SuiteFile, { errors: "all", onExcessProperty: "error" })(shaped)
    if (Either.isLeft(strict)) issues.push(...decodeIssues(strict.left, shaped, SuiteFile))
    const lenient = Either.isRight(strict) ? strict : Schema.decodeUnknownEither(SuiteFile, { errors: "all", onExcessProperty: "ignore" })(shaped)
    const decoded = Either.getOrUndefined(lenient)
    const suiteSection = doc["suite"]
    const suiteId = decoded?.suite.id ??
      (isRecord(suiteSection) && typeof suiteSection["id"] === "string" ? suiteSection["id"] : undefined)

    // member ids: valid, unique case-insensitively
    const entries = entriesOf(doc)
    const rawExperiments = doc["experiments"]
    if (isRecord(rawExperiments)) {
      if (Object.keys(rawExperiments).length === 0) {
        issues.push(issue("experiments", "a suite needs at least one member", "experiments: { baseline: { config: baseline.yaml } }"))
      }
      const seen = new Map<string, string>()
      for (const id of Object.keys(rawExperiments)) {
        const reason = Suite.checkId(id)
        if (reason !== undefined) issues.push(issue(Suite.memberPath(id), `member id ${JSON.stringify(id)} ${reason}`))
        const first = seen.get(Suite.idKey(id))
        if (first !== undefined) {
          issues.push(issue(
            Suite.memberPath(id),
            `member id ${JSON.stringify(id)} is the same as ${JSON.stringify(first)} ignoring case`,
            "member ids must differ ignoring case: they name directories"
          ))
        } else seen.set(Suite.idKey(id), id)
      }
    }

    // run: the suite's; run.store refused
    if (runStore !== undefined) {
      issues.push(issue("run.store", "is refused in a suite: output.root is the suite's one storage entry", "remove run.store and set output.root"))
    }
    const run = (decoded?.run ?? {}) as RunConfig.RunConfigInput
    const resolvedRun = RunConfig.resolve(run)
    if (Either.isLeft(resolvedRun) && Either.isRight(lenient)) issues.push(...resolvedRun.left.issues)

    // output
    const rawOutput = isRecord(doc["output"]) ? doc["output"] : undefined
    const layout: Suite.SuiteLayout = decoded?.output?.layout ?? "combined"
    let root: string | undefined
    if (options.outputRoot !== undefined) root = path.resolve(options.outputRoot)
    else if (decoded?.output?.root !== undefined) root = path.resolve(baseDir, decoded.output.root)
    else if (rawOutput?.["root"] === undefined) {
      issues.push(issue("output.root", "is missing", `output: { root: runs/${
        suiteId !== undefined && Suite.checkId(suiteId) === undefined ? suiteId : "my-suite"
      } } (relative to the suite file), or --output-root DIR`))
    }

    // members: each loaded as the experiment it is
    type Loaded = { readonly entry: Entry; readonly experiment: Experiment; readonly raw: unknown }
    const loaded: Array<Loaded> = []
    for (const entry of entries) {
      const memberFile = path.resolve(baseDir, entry.config)
      if (memberFile === abs) {
        issues.push(issue(Suite.memberPath(entry.id, ".config"), "is the suite file itself: a member is an experiment file"))
        continue
      }
      const r = yield* Effect.either(parse.read(memberFile))
      if (Either.isLeft(r)) {
        const unselected = options.selected !== undefined && !options.selected.some((id) => Suite.idKey(id) === Suite.idKey(entry.id))
        if (unselected) {
          // one warning per member left out, each problem said once
          const problems = [...new Set(memberIssues(entry.id, memberFile, baseDir, r.left).map((i) => `${i.path}: ${i.message}`))]
          warnings.push(`warning: ${problems.join("; ")}; member ${entry.id} is not selected, so this run leaves it out`)
          leftOut.push({ id: entry.id, label: entry.label ?? null, problems })
        } else issues.push(...memberIssues(entry.id, memberFile, baseDir, r.left))
        continue
      }
      if (isRecord(r.right.raw) && r.right.raw["suite"] !== undefined) {
        issues.push(issue(Suite.memberPath(entry.id, ".config"), `${entry.config} is a suite file: suites do not nest`))
        continue
      }
      const checked = yield* Effect.either(
        check(r.right.raw, { file: r.right.file, baseDir: r.right.baseDir, format: r.right.format, literalIssues: r.right.literalIssues }, options)
      )
      if (Either.isLeft(checked)) issues.push(...memberIssues(entry.id, memberFile, baseDir, checked.left))
      else loaded.push({ entry, experiment: checked.right, raw: r.right.raw })
    }
    const plugins = loaded.reduce((acc, l) => Plugins.merge(acc, l.experiment.plugins), Plugins.empty)
    // "file" in a suite is the layout-owned artifacts/ of the output root (SuiteStore), not a path
    if (rawRun?.["artifactBackend"] !== "file") {
      issues.push(...Option.getOrElse(StoreResolver.checkArtifactBackendSpec(rawRun?.["artifactBackend"], plugins), () => []))
    }

    // shared pools
    const shared = decoded?.pools ?? {}
    const sharedNames = Object.keys(isRecord(doc["pools"]) ? doc["pools"] : {})
    const poolsBefore = issues.length
    const sharedPools = buildPools({ pools: shared } as unknown as ExperimentDefinition, plugins, issues, interpolated)
    if (!issues.slice(poolsBefore).some((i) => i.path.startsWith("pools"))) {
      const made = yield* Effect.either(Effect.scoped(Pool.makePools(sharedPools, { plugins: plugins.algorithms })))
      if (Either.isLeft(made)) issues.push(...made.left.issues)
    }
    for (const [name, p] of Object.entries(isRecord(doc["pools"]) ? doc["pools"] : {})) {
      if (!isRecord(p) || !Array.isArray(p["resources"])) continue
      p["resources"].forEach((r: unknown, j: number) => {
        if (isRecord(r) && isRecord(r["options"])) {
          issues.push(...Chat.credentialIssues(r["options"], `pools.${name}.resources[${j}].options`, env, strictEnv))
        }
      })
    }
    for (const name of sharedNames) {
      if (name.startsWith("experiment:")) {
        issues.push(issue(`pools.${name}`, "names starting with \"experiment:\" are reserved for members' private pools", "rename the pool"))
      }
    }
    const rawShared = isRecord(read.raw) && isRecord(read.raw["pools"]) ? read.raw["pools"] : {}

    // bindings, aliases, private pools, digests
    const members: Array<LoadedMember> = []
    const privatePools: Array<Pool.PoolConfig> = []
    const boundBy = new Map<string, Array<{ experiment: string; local: string }>>()
    const algorithms = new Map<string, unknown>(Object.entries(shared).map(([n, p]) => [n, p.algorithm]))
    for (const { entry, experiment, raw } of loaded) {
      const localNames = experiment.pools.map((p) => p.name)
      const base = Suite.memberPath(entry.id, ".poolBindings")
      let bindingsOk = true
      for (const [local, target] of Object.entries(entry.poolBindings)) {
        if (!localNames.includes(local)) {
          bindingsOk = false
          issues.push(issue(
            `${base}.${local}`,
            `${entry.config} declares no pool "${local}"`,
            choose(local, localNames, `the member declares no pools; bind one of its pools`)
          ))
        }
        if (!sharedNames.includes(target)) {
          bindingsOk = false
          issues.push(issue(
            `${base}.${local}`,
            `no top-level pool "${target}"`,
            choose(target, sharedNames, `declare it under pools.${target}`)
          ))
        }
      }
      if (!bindingsOk || suiteId === undefined || Suite.checkId(entry.id) !== undefined) continue
      const aliases: Record<string, string> = {}
      const rawMemberPools = isRecord(raw) && isRecord(raw["pools"]) ? raw["pools"] : {}
      const declared: Record<string, { bound?: string; declaration: Json }> = {}
      for (const p of experiment.pools) {
        const target = entry.poolBindings[p.name]
        if (target !== undefined) {
          aliases[p.name] = target
          declared[p.name] = { bound: target, declaration: plain(rawShared[target]) }
          boundBy.set(target, [...(boundBy.get(target) ?? []), { experiment: entry.id, local: p.name }])
        } else {
          const actual = Suite.privatePoolName(entry.id, p.name)
          aliases[p.name] = actual
          declared[p.name] = { declaration: plain(rawMemberPools[p.name]) }
          privatePools.push({ ...p, name: actual })
          algorithms.set(actual, experiment.definition.pools?.[p.name]?.algorithm)
        }
      }
      const pools: Record<string, { bound?: string; declaration: Json }> = {}
      for (const k of Object.keys(declared).sort()) pools[k] = declared[k]!
      const definition: MemberDefinition = {
        task: experiment.template.specDigest,
        source: plain(experiment.definition.source),
        pools,
        limit: entry.limit ?? null
      }
      members.push({
        id: entry.id,
        label: entry.label,
        limit: entry.limit,
        stopAfterFailures: entry.stopAfterFailures,
        config: experiment.file,
        experiment,
        memberDigest: Suite.memberDigest(suiteId, entry.id),
        definitionDigest: definitionDigest(definition),
        definitionParts: definitionParts(definition),
        previousDigests: previousDefinitionDigests(definition),
        poolAliases: aliases,
        // in the order the member file writes them
        ignoredRunFields: Object.keys(isRecord(raw) && isRecord(raw["run"]) ? raw["run"] : {})
          .filter((k) => experiment.definition.run !== undefined && k in experiment.definition.run),
        outputDir: root === undefined ? "" : layout === "combined" ? root : path.join(root, "experiments", entry.id)
      })
      // each member's own warnings name the member (two members with the same key variable
      // unset gave two identical lines, neither saying which file it was about)
      warnings.push(...experiment.warnings.map((w) => w.replace(/^warning: /, `warning: experiments.${entry.id}: `)))
    }
    for (const name of sharedNames) {
      if (!boundBy.has(name) && loaded.length === entries.length) warnings.push(`warning: pools.${name} is bound by no member`)
    }

    // the members' price tables make the suite run's one table (see `Pricing`): a model two
    // members price differently is refused (one run prices each model one way)
    const pricing: Record<string, { readonly inputPer1M: number; readonly outputPer1M: number }> = {}
    const pricedBy = new Map<string, string>()
    for (const m of members) {
      for (const [model, price] of Object.entries(m.experiment.definition.pricing ?? {})) {
        const known = pricing[model]
        if (known === undefined) {
          pricing[model] = price
          pricedBy.set(model, m.id)
        } else if (known.inputPer1M !== price.inputPer1M || known.outputPer1M !== price.outputPer1M) {
          issues.push(issue(
            `experiments.${m.id}.pricing.${model}`,
            `model ${model} is priced differently by member ${pricedBy.get(model)}: a suite run has one price table`,
            "give the model the same price in every member (or price it on a resource)"
          ))
        }
      }
    }
    const runWithPricing: RunConfig.RunConfigInput = Object.keys(pricing).length === 0 ? run : { ...run, pricing }
    if (issues.length > 0 || suiteId === undefined || root === undefined || Either.isLeft(resolvedRun) || decoded === undefined) {
      return yield* invalid(abs, issues.length > 0 ? issues : [issue("", "the suite could not be loaded")])
    }
    // in a suite the storage entry is the output root, never a run.store
    const { store: _memory, ...effective } = RunConfig.toJson(resolvedRun.right) as Record<string, Json>
    const effectiveOf = (k: string): Json => (k === "store" ? `output.root (${root})` : effective[k] ?? null)
    const allPools = [...sharedPools, ...privatePools]
    const suite: LoadedSuite = {
      id: suiteId,
      file: abs,
      format,
      baseDir,
      run: runWithPricing,
      output: { root, layout },
      pools: allPools,
      sharedPools: sharedPools.map((p) => p.name),
      members,
      plugins,
      unresolvedEnv: unresolved,
      warnings,
      leftOut,
      describe: () =>
        plain({
          suite: { id: suiteId, file: abs, format },
          output: { root, layout },
          run: effective,
          pools: allPools.map((p) => ({
            name: p.name,
            shared: sharedNames.includes(p.name),
            boundBy: boundBy.get(p.name) ?? [],
            algorithm: describeAlgorithm(algorithms.get(p.name) ?? "wait"),
            resources: p.resources.map((r) => Resource.spec(r))
          })),
          experiments: members.map((m) => ({
            id: m.id,
            label: m.label ?? null,
            limit: m.limit ?? null,
            stopAfterFailures: m.stopAfterFailures ?? null,
            config: m.config,
            memberDigest: m.memberDigest,
            definitionDigest: m.definitionDigest,
            outputDir: m.outputDir,
            pools: m.poolAliases,
            ignoredRunFields: m.ignoredRunFields,
            runOverrides: Object.fromEntries(
              m.ignoredRunFields.map((k) => [k, { member: plain((m.experiment.definition.run as Record<string, unknown>)[k]), effective: effectiveOf(k) }])
            ),
            experiment: m.experiment.describe()
          })),
          unresolvedEnv: unresolved
        })
    }
    return suite
  }))
