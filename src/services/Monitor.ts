/**
 * The monitoring picture of a store: what `assay serve` (as JSON and as a dashboard) and
 * `assay watch` (as terminal text) show.
 *
 * - {@link readSnapshot} reads one picture of the selected run (or of every run) from a
 *   {@link StoreService} alone: counts and latency from `stats`, the throughput series from
 *   `completions`, and `/pipelines` pages from `pipelinesPage` (keyset, O(page) at any depth),
 *   through {@link storeReads};
 * - {@link renderSnapshot} and `renderLine` turn it into terminal text.
 *
 * Nothing here knows which store it reads: open a file with `SqliteStore.layerReadOnly`
 * (never migrates, never writes, takes no lock: safe beside a running writer).
 *
 * Every JSON shape here uses snake_case keys: it is the wire format of the HTTP endpoints.
 *
 * @since 0.1.0
 */

// The implementation is in internal/monitor.ts; this module is the public surface
// (what `import { Monitor } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  UnknownRun,
  readSnapshot,
  renderSnapshot,
  resolveSelection,
  snapshotOf,
  storeReads
} from "./internal/monitor.js"
export type {
  CacheWire,
  ErrorWire,
  EventWire,
  MetricRow,
  MonitorReads,
  PipelineCursor,
  PipelinePage,
  PipelineRow,
  RenderOptions,
  ResourceAccountingWire,
  ResourceRow,
  RunSelector,
  RunView,
  Selection,
  Snapshot,
  SnapshotOptions,
  Throughput
} from "./internal/monitor.js"
