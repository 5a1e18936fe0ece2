/**
 * What `assay validate` prints as text (without `--json`): an experiment file's effective
 * experiment, and a suite file's members each described the same way, indented under the
 * member (tester17ad F14: a suite's text was its whole `--json` document, hundreds of lines of
 * retry defaults). `--json` still prints everything (`Experiment.describe`, `LoadedSuite.describe`).
 *
 * @since 0.1.0
 */
import type * as Experiment from "../config/internal/experiment.js"
import type * as SuiteConfig from "../config/Suite.js"
import type * as Pool from "../services/Pool.js"
import { isEnvName } from "../tasks/internal/chat.js"

/**
 * The environment variables an experiment needs and has no value for: its `${VAR}`s without
 * one, and each key variable a resource's `apiKeyEnv` names that is unset or empty (tester18c
 * F6: `unresolved env: none` was printed above the warning that the key's variable is unset).
 * Each with the field path that names it (`pools.NAME.resources[J].options.apiKeyEnv`).
 *
 * @since 0.1.0
 */
export const unresolvedOf = (
  experiment: Experiment.Experiment
): ReadonlyArray<{ readonly name: string; readonly path: string }> => [
  ...experiment.unresolvedEnv,
  ...keyEnvUnset(experiment.pools)
]

/** Each key variable a resource's `apiKeyEnv` names that is unset or empty, with its path. */
const keyEnvUnset = (
  pools: ReadonlyArray<Pool.PoolConfig>
): ReadonlyArray<{ readonly name: string; readonly path: string }> =>
  pools.flatMap((pool) =>
    pool.resources.flatMap((r, j) =>
      ["apiKeyEnv", "api_key_env"].flatMap((k) => {
        const name = r.options[k]
        return typeof name === "string" && isEnvName(name) && (process.env[name] ?? "") === ""
          ? [{ name, path: `pools.${pool.name}.resources[${j}].options.${k}` }]
          : []
      })
    )
  )

/**
 * The lines describing an experiment's pipeline (its tasks, fanout branches indented, the
 * declared control flow), its pools, its source (and the key check), its call cache file, its
 * pricing table and plugins; each line prefixed with `indent`. `run` (the run settings as one
 * JSON line) is left to the caller: an experiment prints its own, a suite member's are the
 * suite's (its ignored fields are listed instead). `boundPools`: the pools a suite binds to one
 * of its shared pools, left out (the shared pool's declaration applies, listed by the suite).
 */
const experimentBody = (
  experiment: Experiment.Experiment,
  indent: string,
  withRun: boolean,
  boundPools: ReadonlySet<string> = new Set()
): Array<string> => {
  const d = experiment.describe() as Record<string, any>
  const lines: Array<string> = []
  const p = d["pipeline"] as Record<string, any>
  lines.push(`pipeline ${p["name"]} (spec ${p["specDigest"]}, includeCode ${p["includeCode"]})`)
  // A fanout's branches are listed under it, indented one level per nesting.
  const taskLines = (tasks: Array<Record<string, any>>, depth: number) => {
    for (const t of tasks) {
      const retry = t["retry"] as Record<string, any>
      const children = (t["children"] ?? []) as Array<Record<string, any>>
      lines.push(
        `${"  ".repeat(depth + 1)}${depth === 0 ? "task" : "branch"} ${t["name"]}: resource ${t["resource"] ?? "-"}, ` +
          `algorithm ${t["algorithm"] === null ? "-" : JSON.stringify(t["algorithm"])}, ` +
          `timeout ${t["timeoutMs"] === null ? "-" : `${t["timeoutMs"]} ms`}, maxAttempts ${retry["maxAttempts"] ?? 1}` +
          (children.length > 0 ? `, ${children.length} branches` : "")
      )
      taskLines(children, depth + 1)
    }
  }
  taskLines(p["tasks"] as Array<Record<string, any>>, 0)
  // The declared control flow (issue 13): each allowed transition, and the loop budget with the
  // run's ceiling (the smaller one applies).
  const control = p["control"] as Record<string, any> | undefined
  if (control !== undefined) {
    const ceiling = d["run"]?.["maxHandoffs"] as number | undefined
    const declared = control["maxHandoffs"] as number | null
    lines.push(
      declared === null
        ? `control: forward only, at most ${ceiling ?? "-"} handoffs per pipeline (run.maxHandoffs)`
        : `control: maxHandoffs ${declared}, run.maxHandoffs ${ceiling ?? "-"}: at most ${
          ceiling === undefined ? declared : Math.min(declared, ceiling)
        } transitions per pipeline`
    )
    for (const e of control["edges"] as Array<string>) lines.push(`  edge ${e}`)
    for (const r of control["rewind"] as Array<string>) lines.push(`  rewind ${r}`)
    for (const s of control["retryAll"] as Array<string>) lines.push(`  retryAll from ${s}`)
  }
  for (const pool of d["pools"] as Array<Record<string, any>>) {
    if (boundPools.has(pool["name"])) continue
    lines.push(`pool ${pool["name"]}: algorithm ${JSON.stringify(pool["algorithm"])}`)
    for (const r of pool["resources"] as Array<Record<string, any>>) {
      lines.push(`  resource ${r["id"]} (${r["kind"]}), capacity ${r["capacity"]}`)
    }
  }
  lines.push(`source: ${JSON.stringify(d["source"])}`)
  const checked = d["source"]["keysChecked"] as { rows: number; wholeFile: boolean } | undefined
  if (checked !== undefined) {
    lines.push(
      checked.wholeFile
        ? `keys: all ${checked.rows} rows have a distinct ${d["source"]["keyField"]}`
        : `keys: the first ${checked.rows} rows have a distinct ${d["source"]["keyField"]} (the file is large; the run checks the rest as it reads them)`
    )
  }
  if (withRun) {
    lines.push(`run: ${JSON.stringify(d["run"])}`)
    lines.push(maxAdmittedLine(experiment.run.maxAdmitted, d["run"]?.["maxAdmitted"]))
  }
  // the shared call cache file resolved, and as written when that differs (tester18c F9)
  const db = experiment.cacheDb
  if (db !== undefined) lines.push(`call cache db: ${db.path}${db.written === db.path ? "" : ` (written ${db.written})`}`)
  if (d["pricing"] !== undefined) lines.push(`pricing: ${JSON.stringify(d["pricing"])}`)
  for (const pl of d["plugins"] as Array<Record<string, any>>) {
    lines.push(`plugin ${pl["specifier"]}: ${pl["error"] === null ? "ok" : `failed: ${pl["error"]}`}`)
  }
  return lines.map((l) => indent + l)
}

/**
 * The cluster submitter's default `maxAdmitted` (`DEFAULT_MAX_ADMITTED` in
 * `services/internal/cluster/submit.ts`, not imported here: `validate` loads no cluster code;
 * a test pins the two together).
 *
 * @internal
 */
export const CLUSTER_MAX_ADMITTED = 1024

/**
 * What `maxAdmitted` each engine will use (newuser37 F11): the `run:` line shows the embedded
 * engine's resolved figure, while `run --engine cluster` admits its own default unless the file
 * (or `--max-admitted`) sets one.
 */
const maxAdmittedLine = (written: number | undefined, embedded: unknown): string =>
  written !== undefined
    ? `maxAdmitted: ${written} (run.maxAdmitted) on either engine`
    : `maxAdmitted: ${String(embedded)} on the embedded engine (its default); ${CLUSTER_MAX_ADMITTED} with --engine cluster ` +
      "(the submitter's default); run.maxAdmitted or --max-admitted sets both"

const unresolvedLine = (unresolved: ReadonlyArray<{ readonly name: string; readonly path: string }>): string =>
  unresolved.length === 0
    ? "unresolved env: none"
    : `unresolved env: ${unresolved.map((u) => `${u.name} (at ${u.path})`).join(", ")}`

/**
 * `assay validate -c EXPERIMENT` as text: `experiment FILE (FORMAT): valid`, the pipeline and its
 * tasks, control, pools and resources, source, `run: {…}` (the effective run settings as one
 * JSON line), the call cache file, pricing, plugins, then `unresolved env: …`.
 *
 * @since 0.1.0
 */
export const experimentText = (experiment: Experiment.Experiment): string =>
  [
    `experiment ${experiment.file} (${experiment.format}): valid`,
    ...experimentBody(experiment, "", true),
    unresolvedLine(unresolvedOf(experiment))
  ].join("\n")

/**
 * `assay validate -c SUITE` as text (the suite is valid): the output root and layout, the
 * suite's effective run settings (one JSON line), each shared pool with the members bound to it
 * and its resources, then each member: its id, label, file, definition digest, its limits, its
 * pool mapping (local name → the pool it uses), the fields of its own `run` block the suite
 * ignores (its value → the effective one), and its experiment described as `validate` describes
 * an experiment, indented. Last, the `${VAR}`s and key variables without a value, the suite's
 * and every member's, each with its path (a member's prefixed `experiments.ID.`). Values from
 * the environment are never printed here: sources, pools and options are shown as their files
 * declare them (`${VAR}` kept).
 *
 * @since 0.5.0
 */
export const suiteText = (loaded: SuiteConfig.LoadedSuite): string => {
  const d = loaded.describe() as Record<string, any>
  const lines: Array<string> = [
    `suite ${loaded.id} (${loaded.file}): valid`,
    `output: ${loaded.output.root} (${loaded.output.layout})`,
    `run: ${JSON.stringify(d["run"])}`
  ]
  for (const pool of d["pools"] as Array<Record<string, any>>) {
    if (pool["shared"] !== true) continue
    const bound = (pool["boundBy"] as Array<{ experiment: string; local: string }>)
      .map((b) => b.local === pool["name"] ? b.experiment : `${b.experiment} (as ${b.local})`)
    lines.push(
      `shared pool ${pool["name"]}: algorithm ${JSON.stringify(pool["algorithm"])}, ` +
        (bound.length === 0 ? "bound by no member" : `bound by ${bound.join(", ")}`)
    )
    for (const r of pool["resources"] as Array<Record<string, any>>) {
      lines.push(`  resource ${r["id"]} (${r["kind"]}), capacity ${r["capacity"]}`)
    }
  }
  const described = d["experiments"] as Array<Record<string, any>>
  loaded.members.forEach((m, i) => {
    const md = described[i]!
    lines.push(
      `experiment ${m.id}${m.label === undefined ? "" : ` "${m.label}"`}: ${m.config} (definition ${m.definitionDigest})`
    )
    if (m.limit !== undefined) lines.push(`  limit: ${m.limit} rows`)
    if (m.stopAfterFailures !== undefined) lines.push(`  stopAfterFailures: ${m.stopAfterFailures}`)
    const aliases = Object.entries(m.poolAliases)
    if (aliases.length > 0) {
      lines.push(
        `  pools: ${
          aliases.map(([local, actual]) =>
            loaded.sharedPools.includes(actual) ? `${local} → ${actual} (shared)` : `${local} (its own)`
          ).join(", ")
        }`
      )
    }
    const overrides = (md["runOverrides"] ?? {}) as Record<string, { member: unknown; effective: unknown }>
    if (m.ignoredRunFields.length > 0) {
      lines.push(
        `  run fields ignored (the suite's apply): ${
          m.ignoredRunFields.map((k) => {
            const o = overrides[k]
            return o === undefined ? k : `${k} (${JSON.stringify(o.member)} → ${JSON.stringify(o.effective)})`
          }).join(", ")
        }`
      )
    }
    const bound = new Set(aliases.filter(([, actual]) => loaded.sharedPools.includes(actual)).map(([local]) => local))
    lines.push(...experimentBody(m.experiment, "  ", false, bound))
  })
  const unresolved = [
    ...loaded.unresolvedEnv,
    ...keyEnvUnset(loaded.pools.filter((p) => loaded.sharedPools.includes(p.name))),
    ...loaded.members.flatMap((m) =>
      unresolvedOf(m.experiment)
        // a pool bound to a shared one is the shared pool's declaration, checked above
        .filter((u) => !Object.entries(m.poolAliases).some(([local, actual]) => loaded.sharedPools.includes(actual) && u.path.startsWith(`pools.${local}.`)))
        .map((u) => ({ name: u.name, path: `experiments.${m.id}.config: ${u.path}` }))
    )
  ]
  lines.push(unresolvedLine(unresolved))
  lines.push("(--json prints every setting of the suite and its members)")
  return lines.join("\n")
}
