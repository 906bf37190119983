// `?worker` imports: build.mjs bundles the file as a self-contained script and inlines it as a string.
declare module "*?worker" {
  const source: string;
  export default source;
}
