/**
 * A stand-in for a service a test never uses: every member access dies with a message naming
 * the member, so a test that does touch it fails loudly instead of hanging or passing.
 */
export const unused = <A extends object>(name: string): A =>
  new Proxy({} as A, {
    get: (_target, key) => {
      throw new Error(`${name}.${String(key)} is not available in this test`)
    }
  })
