/**
 * Plugins: modules (a local file or an npm package) that contribute tasks, acquire
 * algorithms and codecs under names a config file can use.
 *
 * A plugin module exports `tasks` (name → task or task factory), `algorithms` (name →
 * `AlgorithmPlugin`), `codecs` (an array of `Codec`), `stores` (URI scheme → {@link StoreFactory})
 * and `artifactBackends` (URI scheme → {@link ArtifactBackendFactory}), either as named exports
 * or on its default export (`export default definePlugin({ ... })`). Built-in names always
 * win: a plugin entry named like a built-in (a built-in task or algorithm, or the `file`
 * scheme) is ignored (and listed as shadowed). A plugin that fails to load is recorded with
 * its error and never breaks anything that does not use it.
 *
 * @since 0.1.0
 */

// The implementation is in internal/plugins.ts; this module is the public surface
// (what `import { Plugins } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  builtinSchemes,
  definePlugin,
  empty,
  load,
  merge
} from "./internal/plugins.js"
export type {
  ArtifactBackendFactory,
  ArtifactBackendFactoryOptions,
  LoadedPlugin,
  PluginDefinition,
  PluginRegistry,
  Provided,
  StoreFactory,
  StoreFactoryOptions
} from "./internal/plugins.js"
