// `?raw` imports are inlined as strings by the esbuild plugin in build.mjs.
declare module "*?raw" {
  const text: string;
  export default text;
}
declare module "*.css" {
  const text: string;
  export default text;
}
