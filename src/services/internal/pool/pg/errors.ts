/**
 * The typed failure of a global lease that was lost.
 *
 * @internal
 */
import { Schema } from "effect"

/**
 * A global lease ended while its work may still run: the renewal found the slot taken by
 * another lease (`taken`), or renewals kept failing until the local deadline (`deadline`,
 * counted from before the last successful renewal was sent). Class `retryable`: the attempt
 * should be retried, it is not a defect.
 */
export class LeaseLost extends Schema.TaggedError<LeaseLost>("assay/LeaseLost")("LeaseLost", {
  pool: Schema.String,
  resourceId: Schema.String,
  leaseId: Schema.String,
  reason: Schema.Literal("taken", "deadline"),
  errorClass: Schema.Literal("retryable")
}) {
  override get message(): string {
    return this.reason === "taken"
      ? `global lease ${this.leaseId} on ${this.pool}/${this.resourceId} was taken over (its TTL expired)`
      : `global lease ${this.leaseId} on ${this.pool}/${this.resourceId} could not be renewed before its local deadline`
  }
}
