// The path mix of bench/path-calls.mjs and bench/learn-calls.mjs: 300
// namespaces drawn Zipf 1.1 (the demo topology's 6 known ones first, 294
// unknown), from a fixed seed so runs compare.
export const known = ["cell2-group", "acme", "cell3-group", "gitlab-org", "gitlab-com", "legacy-group"];
export const namespaces = [...known, ...Array.from({ length: 294 }, (_, i) => `ns-${i}`)];
const weights = namespaces.map((_, i) => 1 / Math.pow(i + 1, 1.1));
const total = weights.reduce((a, b) => a + b, 0);
let seed = 7;
/** Uniform in [0, 1), deterministic. */
export const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
/** A namespace drawn from the mix. */
export const namespace = () => {
  let r = rand() * total;
  for (let i = 0; i < namespaces.length; i++) if ((r -= weights[i]) <= 0) return namespaces[i];
  return namespaces.at(-1);
};
