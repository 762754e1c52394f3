/** The spec's choices (modes, dispatch policies) with their labels. The value lists come from the generated OpenAPI
 * types (contract/spec.py): a `Record` over the enum fails to type-check when the contract adds or drops a value. */
import type { Schemas } from "../api/types";

type Mode = NonNullable<Schemas["JobSpec"]["mode"]>;
type Policy = NonNullable<Schemas["DispatchSpec"]["policy"]>;

const MODE_LABELS: Record<Mode, string> = {
  sync: "sync (dynamic-batch pipelining)",
  async: "async (bounded-staleness pipelining)",
  colocated: "colocated (baseline)",
};
const POLICY_LABELS: Record<Policy, string> = {
  skew_aware: "skew-aware",
  random: "random",
  round_robin: "round robin",
};

export const MODES = Object.entries(MODE_LABELS) as [Mode, string][];
export const DISPATCH_POLICIES = Object.entries(POLICY_LABELS) as [Policy, string][];
