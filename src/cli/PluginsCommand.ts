/**
 * `assay plugins [-c FILE] [--plugin SPEC]... [--json]`: lists the built-in tasks,
 * algorithms, store forms and artifact backends, then every plugin named by the experiment
 * file, by `--plugin` or by the `ASSAY_PLUGINS` environment variable (comma-separated), with
 * what it provides (tasks, algorithms, codecs, store and artifact backend URI schemes) or the
 * error that stopped it from loading. Exit 0 even when a plugin is broken (that is what it
 * reports); exit 2 with the loader's message (`file:line:column`, the line, a caret) when the
 * experiment file itself cannot be read or parsed, as `validate` does.
 *
 * @since 0.1.0
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as path from "node:path"
import { Console, Effect, Option } from "effect"
import { builtinNames as builtinAlgorithms } from "../services/AcquireAlgorithm.js"
import * as Experiment from "../config/Experiment.js"
import * as Plugins from "../layers/Plugins.js"
import { builtins } from "../tasks/Builtins.js"

/**
 * The `plugins` list of a config file, read without validating the rest. The file is read and
 * parsed by the loader's own reader (`Experiment.read`), so an unknown suffix, a missing file,
 * a syntax error or a module that cannot be imported fail with the same `ConfigError` (exit 2,
 * a clear message) as `validate` and `run`.
 */
const pluginsOfFile = (file: string) =>
  Effect.map(Experiment.read(file), ({ raw }) => {
    const list = typeof raw === "object" && raw !== null ? (raw as Record<string, unknown>)["plugins"] : undefined
    return Array.isArray(list) ? list.filter((p): p is string => typeof p === "string") : []
  })

/**
 * `assay plugins`.
 *
 * @since 0.1.0
 * @category commands
 */
export const plugins = Command.make(
  "plugins",
  {
    // no `exists: "yes"`: a missing file is refused as `run` refuses it (newuser37 F11)
    config: Options.file("config").pipe(
      Options.withAlias("c"),
      Options.optional,
      Options.withDescription("Also list the plugins this experiment file names.")
    ),
    plugin: Options.text("plugin").pipe(
      Options.repeated,
      Options.withDescription("A plugin module to list (a path or a package name); repeatable.")
    ),
    json: Options.boolean("json").pipe(Options.withDescription("Print JSON."))
  },
  ({ config, json, plugin }) =>
    Effect.gen(function*() {
      const fromEnv = (process.env["ASSAY_PLUGINS"] ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "")
      const cwd = process.cwd()
      const fromCli = [...plugin, ...fromEnv]
      const fromFile = Option.isSome(config) ? yield* pluginsOfFile(config.value) : []
      const baseFile = Option.isSome(config) ? path.dirname(path.resolve(config.value)) : cwd
      const a = yield* Plugins.load(fromCli, cwd)
      const b = yield* Plugins.load(fromFile, baseFile)
      const loaded = [...a.plugins, ...b.plugins]
      const out = {
        builtins: {
          tasks: [...builtins.values()].map((t) => ({ name: t.name, signature: t.signature, description: t.description })),
          algorithms: [...builtinAlgorithms],
          stores: [":memory:", "a file path", ...Plugins.builtinSchemes.map((s) => `${s}://`)],
          artifactBackends: ["inline", "null", ...Plugins.builtinSchemes.map((s) => `${s}://`)]
        },
        plugins: loaded
      }
      if (json) return yield* Console.log(JSON.stringify(out, null, 2))
      const lines = ["built-in tasks:"]
      for (const t of out.builtins.tasks) lines.push(`  ${t.name.padEnd(12)} ${t.signature}`)
      lines.push(`built-in algorithms: ${out.builtins.algorithms.join(", ")}`)
      lines.push(`built-in stores: ${out.builtins.stores.join(", ")}`)
      lines.push(`built-in artifact backends: ${out.builtins.artifactBackends.join(", ")}`)
      if (loaded.length === 0) lines.push("plugins: none")
      for (const p of loaded) {
        if (p.error !== null) lines.push(`plugin ${p.specifier}: error: ${p.error}`)
        else {
          lines.push(
            `plugin ${p.specifier} (${p.name}): tasks ${p.tasks.join(", ") || "-"}; algorithms ${
              p.algorithms.join(", ") || "-"
            }; codecs ${p.codecs}; stores ${p.stores.map((s) => `${s}://`).join(", ") || "-"}; artifact backends ${
              p.artifactBackends.map((s) => `${s}://`).join(", ") || "-"
            }${p.shadowed.length > 0 ? `; ignored (built-in names): ${p.shadowed.join(", ")}` : ""}`
          )
        }
      }
      yield* Console.log(lines.join("\n"))
    })
).pipe(Command.withDescription("List built-in tasks and algorithms, and plugins with their load status."))
