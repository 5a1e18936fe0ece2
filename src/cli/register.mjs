/**
 * Registers the CLI's module resolution hooks (`resolveHooks.mjs`) with assay's installation
 * directory; `bin/assay` loads it with `node --import`.
 *
 * @since 0.1.0
 */
import { register } from "node:module"
import { fileURLToPath } from "node:url"

register("./resolveHooks.mjs", import.meta.url, {
  data: { root: fileURLToPath(new URL("../../", import.meta.url)).replace(/\/$/, "") }
})
