/** The inputs of the build, relative to the checkout's root (see buildInputs.mjs). */
export declare const BUILD_INPUTS: ReadonlyArray<string>
/** Where the build records the digest of the inputs it was built from (relative to the root). */
export declare const BUILD_STAMP: string
/** The SHA-256 (hex) of the build's inputs under `root` (see buildInputs.mjs). */
export declare const inputsDigest: (root: string) => string
