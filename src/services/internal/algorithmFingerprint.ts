/**
 * The fingerprint of an algorithm input, internal to `AcquireAlgorithm` (issue 12 §8: not
 * reachable from the package entry). Kept apart from `acquireAlgorithm.ts` so that no import
 * cycle joins the public module and its helpers.
 */
import { Either } from "effect"
import type { ConfigError, PluginError } from "../../domain/Errors.js"
import type { Json } from "../../domain/Json.js"
import type { AlgorithmInput } from "../../domain/Lease.js"
import { type AcquireAlgorithm, type AlgorithmPlugin, resolveAlgorithm } from "../AcquireAlgorithm.js"

/**
 * The fingerprint of an algorithm input, or the resolution error (see
 * `resolveAlgorithm`). `"leastBusy"`, `{ name: "least_busy" }` and `leastBusy()` have
 * one fingerprint, with the implicit `wait` fallback written out.
 */
export const fingerprintOf = (
  input: AlgorithmInput | AcquireAlgorithm,
  plugins?: ReadonlyMap<string, AlgorithmPlugin>
): Either.Either<Json, ConfigError | PluginError> => Either.map(resolveAlgorithm(input, plugins), (a) => a.fingerprint())
