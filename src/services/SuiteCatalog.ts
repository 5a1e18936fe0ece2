/**
 * The suite catalog: what a suite root records about its members beyond their pipelines, and
 * the read views of one member or of all of them. `SuiteStore` (src/layers/SuiteStore.ts)
 * implements it beside the `Store` it provides; the suite runtime (`Suite.run`) and the read
 * commands (report, watch, serve, export on a suite root) use it.
 *
 * - **members**: one row per member id, with its persisted definition digest (task
 *   fingerprint, source configuration, pool declarations before env expansion, bindings,
 *   limit): a known member whose digest changed is refused before anything is written;
 * - **accepted row changes**: a member's input rows edited or removed since its pipelines ran,
 *   accepted once (`--accept-changed-rows`): the old pipelines are kept as superseded history
 *   and left out of the cumulative views; later runs go on without the flag, a new edit is
 *   refused again;
 * - **membership**: per run and member, whether the member was selected, how many pipelines
 *   were admitted, and the source facts (`sourceExhausted`, `sourceError`, `limitReached`) that
 *   tell "the submitted work finished" from "the member finished".
 *
 * @since 0.5.0
 */
import type { Effect } from "effect"
import { Context } from "effect"
import type { ConfigError, StoreUnavailable } from "../domain/Errors.js"
import type { PipelineId, RunId } from "../domain/Ids.js"
import type { SuiteLayout } from "../domain/Suite.js"
import type { TaskStore } from "../domain/TaskStore.js"

/**
 * One registered member of a suite.
 *
 * - `experimentId`: the member id (see `Suite.checkId`);
 * - `definitionDigest`: the member's persisted definition digest;
 * - `definitionParts`: what the digest covers, part by part (part name -> its value or a short
 *   digest of it, e.g. `tasks`, `source`, `limit`, `bindings.apis`, `pools.apis`), so a refused
 *   change names the parts that changed; `null` when unknown (registered by an older build or
 *   by code that gives none);
 * - `label`: display only (`null` when none); `limit`: the member's pipeline limit, `null`
 *   when unlimited;
 * - `createdAt`: when it was first registered (epoch ms).
 *
 * @since 0.5.0
 * @category models
 */
export interface MemberRecord {
  readonly experimentId: string
  readonly definitionDigest: string
  readonly definitionParts?: Readonly<Record<string, string>> | null | undefined
  readonly label: string | null
  readonly limit: number | null
  readonly createdAt: number
}

/**
 * What a run registers of a member: its {@link MemberRecord} without `createdAt`, and
 * `previousDigests`, the digests an older format gave the same definition (a member
 * registered under one of them matches, and its record is upgraded to `definitionDigest`).
 *
 * @since 0.6.0
 * @category models
 */
export type MemberRegistration = Omit<MemberRecord, "createdAt"> & {
  readonly previousDigests?: ReadonlyArray<string> | undefined
}

/**
 * The facts of one member in one run.
 *
 * - `selected`: whether the run ran this member (`--experiment`);
 * - `admitted`: pipelines (repeats included) the run admitted for it;
 * - `sourceExhausted`: the member's source was read to its end in this run (a limit never
 *   sets it);
 * - `sourceError`: the message of the source's failure, `null` when none;
 * - `limitReached`: admission stopped at the member's or the run's limit;
 * - `updatedAt`: epoch ms of the last change.
 *
 * @since 0.5.0
 * @category models
 */
export interface MembershipRecord {
  readonly runId: RunId
  readonly experimentId: string
  readonly selected: boolean
  readonly admitted: number
  readonly sourceExhausted: boolean
  readonly sourceError: string | null
  readonly limitReached: boolean
  readonly updatedAt: number
}

/**
 * The changeable facts of a membership row (see {@link MembershipRecord}).
 *
 * @since 0.5.0
 * @category models
 */
export type MembershipFacts = Partial<Omit<MembershipRecord, "runId" | "experimentId" | "updatedAt">>

/**
 * A pipeline kept as history only: its input row was edited or removed since it ran, and the
 * change accepted (`assay run --accept-changed-rows`). The cumulative views leave it out (one
 * run's view still shows it); `supersededAt` is the acceptance's time (epoch ms).
 *
 * @since 0.7.0
 * @category models
 */
export interface SupersededRecord {
  readonly pipelineId: PipelineId
  readonly experimentId: string
  readonly localKey: string
  readonly supersededAt: number
}

/**
 * One accepted change of a member's input rows, as the catalog records it: the member, when
 * (epoch ms), the local keys the source no longer yields (`staleKeys`, their pipelines now
 * superseded), the local keys (row digests) it yields instead that the root did not hold
 * (`newKeys`), and how many stored pipelines were superseded (repeats counted).
 *
 * @since 0.7.0
 * @category models
 */
export interface RowAcceptance {
  readonly experimentId: string
  readonly acceptedAt: number
  readonly staleKeys: ReadonlyArray<string>
  readonly newKeys: ReadonlyArray<string>
  readonly pipelines: number
}

/**
 * The suite catalog service. Every method has `R = never`.
 *
 * - `suiteId`, `layout`, `root` (absolute output root), `outputDirOf(id)`: the root itself
 *   (`combined`) or `root/experiments/ID` (`byExperiment`);
 * - `registerMembers`: records new members (at `nowMs`, epoch ms); a known member given with
 *   another definition digest (neither `definitionDigest` nor one of its `previousDigests`)
 *   fails with `ConfigError` (path `experiments.ID`) before anything is written; label and
 *   limit of known members are updated, and a member registered under a previous digest gets
 *   the current digest and parts;
 * - `members`: every registered member, by id;
 * - `recordMembership`: upserts the facts of (run, member); only the given fields change (a
 *   new row starts unselected, 0 admitted, nothing exhausted, no error);
 * - `membership`: the rows of one run (or of every run), by run then member id;
 * - `view`: the read view of one member (`experimentId`), or the merged cumulative view of
 *   every member (`undefined`); an unknown member fails with `ConfigError` (path
 *   `experiment`).
 *
 * Writes fail with `StoreUnavailable` on a read-only root.
 *
 * @since 0.5.0
 * @category models
 */
export interface SuiteCatalogService {
  readonly suiteId: string
  readonly layout: SuiteLayout
  readonly root: string
  readonly outputDirOf: (experimentId: string) => string
  readonly registerMembers: (
    members: ReadonlyArray<MemberRegistration>,
    nowMs: number
  ) => Effect.Effect<void, ConfigError | StoreUnavailable>
  readonly members: Effect.Effect<ReadonlyArray<MemberRecord>, StoreUnavailable>
  readonly recordMembership: (
    runId: RunId,
    experimentId: string,
    facts: MembershipFacts,
    nowMs: number
  ) => Effect.Effect<void, StoreUnavailable>
  readonly membership: (runId?: RunId) => Effect.Effect<ReadonlyArray<MembershipRecord>, StoreUnavailable>
  readonly view: (experimentId?: string) => Effect.Effect<TaskStore, StoreUnavailable | ConfigError>
  /**
   * Accepts a change of member `experimentId`'s input rows (writers only): its stored
   * pipelines whose local key is in `staleKeys` become superseded (see
   * {@link SupersededRecord}), those whose key is in `revivedKeys` (rows restored as they were)
   * are current again, and the acceptance is recorded ({@link RowAcceptance}, when `staleKeys`
   * is not empty), in that order, at `nowMs`. Returns the number of pipelines superseded.
   * Absent on read-only implementations (since 0.7.0).
   */
  readonly acceptChangedRows?: ((change: {
    readonly experimentId: string
    readonly staleKeys: ReadonlyArray<string>
    readonly newKeys: ReadonlyArray<string>
    readonly revivedKeys: ReadonlyArray<string>
    readonly nowMs: number
  }) => Effect.Effect<number, StoreUnavailable>) | undefined
  /** The accepted row changes, oldest first (absent: none; since 0.7.0). */
  readonly acceptances?: Effect.Effect<ReadonlyArray<RowAcceptance>, StoreUnavailable> | undefined
  /**
   * The superseded pipelines of one member (or of every member), by member, local key,
   * pipeline id (absent: none; since 0.7.0).
   */
  readonly superseded?: ((experimentId?: string) => Effect.Effect<ReadonlyArray<SupersededRecord>, StoreUnavailable | ConfigError>) | undefined
  /**
   * The members whose database is missing when the root was opened (`byExperiment`: recorded
   * as created, file gone), each with the file; they read as empty. Absent: none.
   */
  readonly missingDatabases?: ReadonlyArray<{ readonly experimentId: string; readonly file: string }> | undefined
}

/**
 * The suite catalog tag (see {@link SuiteCatalogService}).
 *
 * @since 0.5.0
 * @category tags
 */
export class SuiteCatalog extends Context.Tag("assay/SuiteCatalog")<SuiteCatalog, SuiteCatalogService>() {}
