// Shadow evaluation's configurations (docs/benchmark.md, "Shadow
// evaluation"): a router configuration of the rounds with a second ruleset
// (GITLAB_SHADOW_RULES_CONFIG) evaluated beside its own on a share of its
// requests (GITLAB_SHADOW_SAMPLE). They run only when named (BENCH_CONFIGS,
// BENCH_PAIRED, BENCH_PROFILE): a run that names none is as it was.

/**
 * `name`: the configuration; `of`: the configuration it adds the shadow to;
 * `shadow`: the shadow ruleset; `sample`: GITLAB_SHADOW_SAMPLE's text.
 */
export const SHADOWS = [
  // Every request evaluated against the other ruleset: the cost of a
  // sampled request, and a disagreement's log line on 86 % of the mix.
  { name: "token-warm-shadow", of: "token-warm", shadow: "cells", sample: "1" },
  { name: "cells-shadow", of: "cells", shadow: "session_token", sample: "1" },
  // Every request evaluated against its own ruleset: they always agree, so
  // this is the evaluation alone, without a log line.
  { name: "token-warm-shadow-agree", of: "token-warm", shadow: "session_token", sample: "1" },
  // The shadow set but no request drawn: what an unsampled request pays
  // (both rulesets' headers read, the draw skipped at share 0).
  { name: "token-warm-shadow-unsampled", of: "token-warm", shadow: "cells", sample: "0" },
];

/**
 * The shadow configurations of `shadows` whose base configuration is among
 * `specs`: each the base's spec with the two settings added to its
 * bindings and `onlyNamed` set.
 */
export function shadowConfigurations(specs, shadows = SHADOWS) {
  return shadows.flatMap(({ name, of, shadow, sample }) => {
    const base = specs.find((x) => x.name === of);
    if (!base) return [];
    const bindings = { ...base.options.bindings, GITLAB_SHADOW_RULES_CONFIG: shadow, GITLAB_SHADOW_SAMPLE: sample };
    return [{ ...base, name, onlyNamed: true, options: { ...base.options, bindings } }];
  });
}
