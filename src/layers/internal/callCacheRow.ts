/**
 * The column values of a call-cache entry, in the order both stores' `call_cache` tables
 * take them (`key, task_name, namespace, type_name, codec, payload, usage, created_at`).
 *
 * @internal
 */
import type { CacheEntry } from "../../services/CallCache.js"

/**
 * `e` as the parameters of the `call_cache` upsert: the namespace and usage as JSON text (usage
 * `null` when absent), the payload as a `Buffer` over the entry's bytes (no copy), `createdAt`
 * in epoch ms.
 *
 * @internal
 */
export const entryParams = (e: CacheEntry): [string, string, string, string, string, Buffer, string | null, number] => [
  e.key,
  e.taskName,
  JSON.stringify(e.namespace),
  e.typeName,
  e.codec,
  Buffer.from(e.data.buffer, e.data.byteOffset, e.data.byteLength),
  e.usage === null ? null : JSON.stringify(e.usage),
  e.createdAt
]
