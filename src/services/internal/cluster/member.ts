/**
 * A suite member's view of a runner's pools on the cluster engine: the attempts of a member's
 * pipeline see the pools under the member's own names (`Pools.aliased` over its pool
 * aliases), as on the embedded engine (`runner/run.ts`), so a member's `apis` reaches the
 * suite's shared pool or its private `experiment:ID:NAME` one, both global Postgres pools.
 *
 * @internal
 */
import type { AttemptShared, MemberFacts } from "../runner/attemptContext.js"
import { aliased } from "../pool/aliased.js"

/**
 * The `PipelineEnv.memberShared` of a task execution whose attempts share `shared`: for a
 * member, `shared` with the pools aliased by the member's pool aliases (made once per member
 * and execution).
 *
 * @internal
 */
export const memberSharedOf = (shared: AttemptShared): (member: MemberFacts) => AttemptShared => {
  const byMember = new Map<string, AttemptShared>()
  return (member) => {
    const key = `${member.suiteId}\u0000${member.experimentId}`
    let s = byMember.get(key)
    if (s === undefined) {
      s = { ...shared, pools: aliased(shared.pools, member.poolAliases) }
      byMember.set(key, s)
    }
    return s
  }
}
