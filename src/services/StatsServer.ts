/**
 * The read-only HTTP view of a store (`assay serve`): a small `HttpRouter` app on
 * `@effect/platform`'s `HttpServer`.
 *
 * | route | answer |
 * | --- | --- |
 * | `/` | the self-refreshing dashboard (src/services/Dashboard.ts) |
 * | `/stats` | the {@link Monitor.Snapshot} of the selected run |
 * | `/metrics` | `{ run_id, rows }` reported metrics; `?pipeline_id=` for one pipeline's |
 * | `/events` | `{ run_id, rows }` latest events, oldest first; `?kind=`, `?limit=` (≤ 1000, default 100) |
 * | `/pipelines` | `{ run_id, rows, next }` paged by key: `?after=<next>&limit=` (≤ 1000, default 50) |
 * | `/resources` | `{ run_id, rows }` pool resources with health |
 * | `/errors` | `{ run_id, rows }` latest failed pipelines; `?limit=` (≤ 1000, default 20) |
 * | `/export` | a download of `?rows=` (`results`, `pipelines`, `tasks`, `attempts`, `events`, `artifacts`) as `?format=` (`csv`, `jsonl`, `json`): the bytes `assay export --rows ROWS --run-id RUN` writes; `?state=` keeps the `results`/`pipelines` rows in that state |
 * | `/experiments` | suite roots only: the members |
 * | `/study`, `/study/evidence?metric=&variant=`, `/study/page` | a study's output root only: its comparison (JSON), the evidence of one number (JSON), the Study page |
 * | `/assets/uplot.js`, `/assets/uplot.css` | the chart library, served locally |
 *
 * Every route takes `run_id`: absent = the server's default selection (the whole store unless
 * the server was given one), `all` = the whole store (every run), `latest` = the most recently
 * started run, an id = that run (404 when unknown). Bad parameters answer 400 with `{ error }`;
 * any method but GET/HEAD answers 405. Only `/export` serves artifact payloads (decoded, as
 * `assay export` does, with the secrets the store never held); nothing writes to the store.
 *
 * @since 0.1.0
 */

// The implementation is in internal/statsServer.ts; this module is the public surface
// (what `import { StatsServer } from "assay"` gives). Helpers used only inside
// src/ are imported from the internal module.
export {
  BadRequest,
  QueryParams,
  makeApp,
  serve
} from "./internal/statsServer.js"
export type {
  AppOptions,
  ServeInfo,
  ServeOptions
} from "./internal/statsServer.js"
