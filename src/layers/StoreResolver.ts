/**
 * The store resolver: turns a store spec, as a config file (`run.store`), a flag (`--store`)
 * or a read command's argument writes it, into the `Store` layer that opens it.
 *
 * A spec is, in this order (built-ins always win):
 * - `":memory:"`: the memory store (nothing persists);
 * - `file:///abs/runs/qa.db`: the SQLite file at that path (the built-in `file` scheme);
 * - `scheme://...` (see `PluginUri` for what counts as a URI): the store a plugin provides for
 *   that scheme (the plugin's `stores` export); an unknown scheme is a `ConfigError` (exit 2)
 *   naming it and the known ones, before anything is opened;
 * - anything else: an SQLite file path (`runs/qa.db`, `C:\runs\qa.db`).
 *
 * Run and resume open the store for writing with the run's journal mode and artifact backend;
 * report, export, merge, serve and watch open it read-only (`openReadOnly`).
 *
 * @since 0.1.0
 */

// The implementation is in internal/storeResolver.ts; this module is the public surface
// (what `import { StoreResolver } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  layer,
  layerOpener
} from "./internal/storeResolver.js"
export type {
  OpenOptions,
  StoreRegistry,
  StoreTarget
} from "./internal/storeResolver.js"
